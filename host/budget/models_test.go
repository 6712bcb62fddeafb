package budget

// Model shapes from spec §7.
const (
	llamaKV, llamaHD, llamaL, llamaH, llamaI, llamaV, llamaCtx = 8, 128, 32, 4096, 14336, 128256, 8192
	qwenKV, qwenHD, qwenL, qwenCtx                             = 8, 128, 36, 40960
	dsRank, dsRope, dsL, dsCtx                                 = 512, 64, 61, 163840
)
