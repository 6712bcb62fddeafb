package budget

import "math"

// Cell sizes are bytes per token over all local layers (§3 "Cell size").
// They are float64 because some pools (MXFP8, hybrid SWA) have fractional
// cells in SGLang; for integer pools the value is an exact integer.

// kvHeadsPerRank is n = max(1, kv_heads // tp) (§3).
func kvHeadsPerRank(kvHeads, tp int) int {
	if tp < 1 {
		tp = 1
	}
	return max(1, kvHeads/tp)
}

// CellMHA is the MHA/GQA cell n·(head_dim+v_head_dim)·L·e with
// n = max(1, kvHeads//tp) (§3). Pass tp = attention TP size (times DCP).
// elemBytes is 2 for bf16, 1 for FP8 (V1: Llama-3-8B bf16 131 072).
func CellMHA(kvHeads, headDim, vHeadDim, layers, tp int, elemBytes float64) float64 {
	n := kvHeadsPerRank(kvHeads, tp)
	return float64(n*(headDim+vHeadDim)*layers) * elemBytes
}

// CellMXFP8 is the MXFP8 cell: the FP8 cell plus one scale byte per 32
// elements, n·(hd+vd)·L/32 (§3; V1: 67 584).
func CellMXFP8(kvHeads, headDim, vHeadDim, layers, tp int) float64 {
	n := kvHeadsPerRank(kvHeads, tp)
	elems := n * (headDim + vHeadDim) * layers
	return float64(elems) + float64(elems)/32
}

// CellFP4MHA is the FP4 MHA cell (nvfp4 / fp4_mx_block16, §3): packed
// n·(hd+vd)·L/2, scales n·hd·L·2/16 and a shared FP8 dequant workspace
// n·hd·2 (V1: 32 768 + 4 096 + 2 048 = 38 912).
func CellFP4MHA(kvHeads, headDim, vHeadDim, layers, tp int) float64 {
	n := kvHeadsPerRank(kvHeads, tp)
	packed := float64(n*(headDim+vHeadDim)*layers) / 2
	scales := float64(n*headDim*layers*2) / 16
	return packed + scales + float64(n*headDim*2)
}

// CellMLA is the MLA cell (kv_lora_rank+qk_rope_head_dim)·L·e, not divided
// by TP (§3; V1: DeepSeek-V3 bf16 70 272, fp8 35 136).
func CellMLA(kvLoraRank, ropeDim, layers int, elemBytes float64) float64 {
	return float64((kvLoraRank+ropeDim)*layers) * elemBytes
}

// CellMLAFP4 is the MLA FP4 cell MLA/2 + ((rank+rope)/16)·L with the MLA
// cell at one storage byte per element (§3).
func CellMLAFP4(kvLoraRank, ropeDim, layers int) float64 {
	return CellMLA(kvLoraRank, ropeDim, layers, 1)/2 + float64(float64(kvLoraRank+ropeDim)/16*float64(layers))
}

// CellMLADSAFP8 is the MLA DSA FP8 cell (§3): per layer
// rank + rank/128·4 + rope·2 (656 for 512/64) plus the indexer
// (d + d/128·4)·L.
func CellMLADSAFP8(kvLoraRank, ropeDim, indexerDim, layers int) float64 {
	perLayer := float64(kvLoraRank) + float64(float64(kvLoraRank)/128*4) + float64(ropeDim*2)
	indexer := float64(indexerDim) + float64(float64(indexerDim)/128*4)
	return float64(perLayer*float64(layers)) + float64(indexer*float64(layers))
}

// CellHybridSWA is the hybrid sliding-window cell F·(nf + draft_full) +
// r·S·ns (§3), with F and S the per-layer bytes of full and SWA layers and
// r = swa_full_tokens_ratio (SGLang default 0.8); with no full layers it is
// S·ns. V7: gpt-oss-20b 44 236.8.
func CellHybridSWA(fullPerLayer, swaPerLayer float64, nFull, nSWA, draftFull int, ratio float64) float64 {
	if nFull == 0 {
		return swaPerLayer * float64(nSWA)
	}
	full := float64(fullPerLayer * float64(nFull+draftFull))
	return full + float64(float64(ratio*swaPerLayer)*float64(nSWA))
}

// CellWithDraft adds EAGLE/standalone draft layers to a cell:
// int(cell·(1 + draft_layers/L)) (§3; V1: DeepSeek-V3 + 1 MTP layer 71 424).
func CellWithDraft(cell float64, draftLayers, layers int) float64 {
	if layers <= 0 {
		return cell
	}
	return math.Trunc(cell * (1 + float64(draftLayers)/float64(layers)))
}
