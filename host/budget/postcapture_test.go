package budget

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// v14Input is V14: Llama-3-8B (64 buffers of 2048 B rows), V3 inputs,
// f = 0.980, free after capture 66 800 000 000 B.
func v14Input() PostCaptureInput {
	rows := make([]int64, 2*llamaL)
	for i := range rows {
		rows[i] = llamaKV * llamaHD * 2
	}
	return PostCaptureInput{
		PBytes: v3P, ABytes: v3A, MemFractionStatic: 0.98,
		RowBytes: rows, PageSize: 1, FreeAfterCaptureBytes: 66800000000,
	}
}

func TestPostCaptureKVV14(t *testing.T) {
	res, err := PostCaptureKV(v14Input())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want int64
	}{
		{"T_ub", int64(res.UpperBoundTokens), 510678},
		{"boot backing", res.BootBackingBytes, 134217728},
		{"budget", res.BudgetBytes, 65239991541},
		{"T", int64(res.Tokens), 497741},
		{"T − default-f T", int64(res.Tokens - 413733), 84008},
		{"mapped", res.MappedBytes, 65364033536},
		{"over-commit", res.OverCommitBytes, 124041995},
		{"free after", res.FreeAfterBytes, 1570184192},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if res.SlackGiB != 1.5778710937500013 || res.HeadroomGiB != res.SlackGiB {
		t.Errorf("slack %v headroom %v", res.SlackGiB, res.HeadroomGiB)
	}
	if pyRound(res.FreeGiB, 8) != 62.21234798 {
		t.Errorf("free = %v GiB", res.FreeGiB)
	}
	if over := res.OverCommitBytes / MiB; over != 118 {
		t.Errorf("over-commit = %d MiB, want 118", over)
	}
	// Reference mapping: 64·align(497 742·2048, 2 MiB).
	per := (int64(497742*2048) + (2 << 20) - 1) / (2 << 20) * (2 << 20)
	if 64*per != res.MappedBytes {
		t.Errorf("reference mapping %d", 64*per)
	}
	// The free memory left is below the headroom SGLang aimed for.
	if float64(res.FreeAfterBytes) >= res.HeadroomGiB*GiB {
		t.Errorf("free after %d is not below the headroom", res.FreeAfterBytes)
	}
}

func TestPostCaptureKVNoOvercommitV14(t *testing.T) {
	sgl, _ := PostCaptureKV(v14Input())
	res, err := PostCaptureKVNoOvercommit(v14Input())
	if err != nil {
		t.Fatal(err)
	}
	if res.BudgetBytes != sgl.BudgetBytes || res.UpperBoundTokens != sgl.UpperBoundTokens {
		t.Errorf("budget %d/%d differs from SGLang's", res.BudgetBytes, res.UpperBoundTokens)
	}
	if res.MappedBytes > res.BudgetBytes || res.OverCommitBytes > 0 {
		t.Errorf("mapped %d > budget %d", res.MappedBytes, res.BudgetBytes)
	}
	if float64(res.FreeAfterBytes) < res.HeadroomGiB*GiB {
		t.Errorf("free after %d is below the headroom %v GiB", res.FreeAfterBytes, res.HeadroomGiB)
	}
	if res.Tokens >= sgl.Tokens {
		t.Errorf("T = %d, want fewer than SGLang's %d", res.Tokens, sgl.Tokens)
	}
	// Maximality: one more page would over-commit.
	in := v14Input()
	pc, _ := newPostCapture(in)
	if pc.mapped(res.Tokens+1) <= res.BudgetBytes {
		t.Errorf("T = %d is not maximal", res.Tokens)
	}
	t.Logf("V14 corrected: T = %d (SGLang %d), mapped %d, slack kept %d B", res.Tokens, sgl.Tokens, res.MappedBytes, -res.OverCommitBytes)
}

// bruteNoOvercommit walks pages down from SGLang's T, the obvious way.
func bruteNoOvercommit(in PostCaptureInput, tSGL int, budget int64) int {
	page := max(1, in.PageSize)
	gran := in.GranularityBytes
	if gran == 0 {
		gran = DefaultVMMGranularity
	}
	for t := tSGL; t >= 0; t -= page {
		var m int64
		for _, r := range in.RowBytes {
			m += (int64(t+page)*r + gran - 1) / gran * gran
		}
		if m <= budget {
			return t
		}
	}
	return 0
}

func TestPostCaptureKVNoOvercommitProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 300 {
		in := randomPostCapture(rng)
		checkNoOvercommit(t, i, in)
	}
}

func randomPostCapture(rng *rand.Rand) PostCaptureInput {
	n := 1 + rng.IntN(80)
	rows := make([]int64, n)
	for j := range rows {
		rows[j] = 64 * (1 + rng.Int64N(128))
	}
	p := 40*GiB + rng.Int64N(100*GiB)
	return PostCaptureInput{
		PBytes: p, ABytes: p - rng.Int64N(30*GiB), MemFractionStatic: 0.9 + 0.09*rng.Float64(),
		WorldSize: 1 + rng.IntN(8), RowBytes: rows, PageSize: []int{1, 16, 64}[rng.IntN(3)],
		GranularityBytes:      []int64{0, 2 << 20, 64 << 10}[rng.IntN(3)],
		FreeAfterCaptureBytes: p - rng.Int64N(40*GiB),
	}
}

func checkNoOvercommit(t *testing.T, i int, in PostCaptureInput) {
	t.Helper()
	sgl, err1 := PostCaptureKV(in)
	res, err2 := PostCaptureKVNoOvercommit(in)
	if err2 != nil {
		var ime *InsufficientMemoryError
		if !errors.As(err2, &ime) {
			t.Fatalf("case %d: %v (SGLang: %v)", i, err2, err1)
		}
		return
	}
	if res.MappedBytes > res.BudgetBytes {
		t.Fatalf("case %d: mapped %d > budget %d", i, res.MappedBytes, res.BudgetBytes)
	}
	if res.Tokens > sgl.Tokens || res.Tokens%max(1, in.PageSize) != 0 {
		t.Fatalf("case %d: T %d vs SGLang %d page %d", i, res.Tokens, sgl.Tokens, in.PageSize)
	}
	if want := bruteNoOvercommit(in, sgl.Tokens, res.BudgetBytes); res.Tokens != want {
		t.Fatalf("case %d: T = %d, brute force %d", i, res.Tokens, want)
	}
}

func FuzzPostCaptureKVNoOvercommit(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		checkNoOvercommit(t, 0, randomPostCapture(rand.New(rand.NewPCG(a, b))))
	})
}

func TestPostCaptureErrors(t *testing.T) {
	// 1 GiB free against a 1.58 GiB headroom: the budget is the boot
	// backing only. With 4 KiB granularity and 2-token pages SGLang still
	// maps one page beyond it; the corrected variant refuses.
	in := v14Input()
	in.FreeAfterCaptureBytes, in.GranularityBytes, in.PageSize = 1<<30, 4096, 2
	sgl, err := PostCaptureKV(in)
	if err != nil || sgl.Tokens != 2 || sgl.BudgetBytes != 64*4096 || sgl.OverCommitBytes != 64*4096 {
		t.Errorf("SGLang starved resize = %+v, %v", sgl, err)
	}
	_, err = PostCaptureKVNoOvercommit(in)
	var ime *InsufficientMemoryError
	if !errors.As(err, &ime) || ime.Phase != "post-capture-kv" || ime.Knob != "mem_fraction_static" || ime.NeedBytes != 64*8192 {
		t.Fatalf("err = %v", err)
	}
	in.MemFractionStatic = ime.SuggestValue
	if res, err := PostCaptureKVNoOvercommit(in); err != nil || res.Tokens == 0 {
		t.Errorf("suggested f %v: %+v, %v", ime.SuggestValue, res, err)
	}
	// A user cap below one page leaves SGLang with no tokens either.
	capped := v14Input()
	capped.PageSize, capped.MaxTotalTokens = 64, 63
	if _, err := PostCaptureKV(capped); !errors.As(err, &ime) {
		t.Errorf("cap below a page: err = %v", err)
	}

	floor := v14Input()
	floor.ReserveFloor, floor.ReserveMiB = true, 13824
	res, err := PostCaptureKV(floor)
	if err != nil || res.HeadroomGiB != 13.5 {
		t.Errorf("reserve floor headroom = %v, %v", res.HeadroomGiB, err)
	}

	for _, tc := range []struct {
		mut   func(*PostCaptureInput)
		field string
	}{
		{func(in *PostCaptureInput) { in.PBytes = 0 }, "KVBudgetInput.PBytes"},
		{func(in *PostCaptureInput) { in.RowBytes = nil }, "PostCaptureInput.RowBytes"},
		{func(in *PostCaptureInput) { in.RowBytes = []int64{0} }, "PostCaptureInput.RowBytes[0]"},
		{func(in *PostCaptureInput) { in.PageSize = -1 }, "PostCaptureInput.PageSize"},
		{func(in *PostCaptureInput) { in.GranularityBytes = -1 }, "PostCaptureInput.GranularityBytes"},
		{func(in *PostCaptureInput) { in.MaxTotalTokens = -1 }, "PostCaptureInput.MaxTotalTokens"},
		{func(in *PostCaptureInput) { in.FreeAfterCaptureBytes = -1 }, "PostCaptureInput.FreeAfterCaptureBytes"},
		{func(in *PostCaptureInput) { in.ReserveMiB = -1 }, "PostCaptureInput.ReserveMiB"},
	} {
		in := v14Input()
		tc.mut(&in)
		_, err := PostCaptureKVNoOvercommit(in)
		if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("err = %v, want ErrInvalidInput naming %s", err, tc.field)
		}
	}
}
