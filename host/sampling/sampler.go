package sampling

import (
	"math"
	"sort"

	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Params are the knobs of the standard policy.
type Params struct {
	Temperature float32
	TopK        int
	TopP        float32
	MinP        float32
}

// Greedy reports whether p reduces to argmax.
func (p Params) Greedy() bool { return p.Temperature <= 0 || p.TopK == 1 }

// Rand is a counter-based generator: the draw for (seed, step) depends on
// nothing else, which makes seeded runs independent of batch composition.
func Rand(seed, step uint64) float64 {
	z := seed ^ (step+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// candidate is one token surviving the filters.
type candidate struct {
	id int32
	p  float64
}

// Sampler holds reusable scratch; one per engine goroutine.
type Sampler struct {
	cands []candidate
	rs    rowScratch
	id    [1]int32
	v     [1]float32
}

// Sample picks a token from logits. It does not modify logits.
func (s *Sampler) Sample(logits []float32, p Params, seed, step uint64) int32 {
	return s.sample(logits, nil, p, seed, step)
}

// SampleSeq picks seq's next token from row on the host: the penalty and
// bias pre-ops (read from a sorted side list; row is not modified), then
// temperature, top-k, top-p and min-p from seq.Params, and one draw of
// Rand(seq.Seed, seq.Step). Greedy is the argmax of the adjusted logits
// (ties: the lower id). seq.Params must come from NewSeqState.
func (s *Sampler) SampleSeq(row []float32, seq *SeqState) int32 {
	hp := &seq.Params.host
	touched := s.rs.adjust(row, seq, hp, true, true)
	return s.sample(row, touched, Params{Temperature: hp.temperature, TopK: hp.topK, TopP: hp.topP, MinP: hp.minP}, seq.Seed, seq.Step)
}

// sample is Sample over logits adjusted by touched (sorted by id).
func (s *Sampler) sample(logits []float32, touched []touch, p Params, seed, step uint64) int32 {
	if len(touched) > 0 {
		// The best adjusted logit: a one-entry top-K over row and touched.
		if s.rs.topK(logits, touched, 1, s.id[:], s.v[:]) == 0 {
			return int32(kcpu.Argmax(logits)) // no finite logit
		}
	}
	if p.Greedy() {
		if len(touched) > 0 {
			return s.id[0]
		}
		return int32(kcpu.Argmax(logits))
	}
	inv := 1 / float64(p.Temperature)
	var maxL float64
	if len(touched) > 0 {
		maxL = float64(s.v[0])
	} else {
		maxL = float64(logits[kcpu.Argmax(logits)])
	}
	s.cands = s.cands[:0]
	// min-p keeps tokens whose probability is at least MinP times the best's:
	// exp((l-max)/T) >= MinP.
	var cut float64 = math.Inf(-1)
	if p.MinP > 0 {
		cut = math.Log(float64(p.MinP))
	}
	t := 0
	for i, l := range logits {
		if t < len(touched) && int(touched[t].id) == i {
			l = touched[t].v
			t++
		}
		z := (float64(l) - maxL) * inv
		if z < cut {
			continue
		}
		s.cands = append(s.cands, candidate{int32(i), z})
	}
	if p.TopK > 0 && p.TopK < len(s.cands) || p.TopP > 0 && p.TopP < 1 {
		sort.Slice(s.cands, func(i, j int) bool {
			a, b := s.cands[i], s.cands[j]
			return a.p > b.p || a.p == b.p && a.id < b.id
		})
		if p.TopK > 0 && p.TopK < len(s.cands) {
			s.cands = s.cands[:p.TopK]
		}
	}
	var sum float64
	for i := range s.cands {
		s.cands[i].p = math.Exp(s.cands[i].p)
		sum += s.cands[i].p
	}
	if p.TopP > 0 && p.TopP < 1 {
		var acc float64
		for i := range s.cands {
			acc += s.cands[i].p
			if acc >= float64(p.TopP)*sum {
				s.cands = s.cands[:i+1]
				sum = acc
				break
			}
		}
	}
	r := Rand(seed, step) * sum
	for _, c := range s.cands {
		r -= c.p
		if r < 0 {
			return c.id
		}
	}
	return s.cands[len(s.cands)-1].id
}

// LogSoftmaxAt returns log p(id) under logits and fills top with the n best
// (id, logprob) pairs in descending order.
func LogSoftmaxAt(logits []float32, id int32, n int, top []TokenLogprob) (float32, []TokenLogprob) {
	maxL := float64(logits[kcpu.Argmax(logits)])
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - maxL)
	}
	lse := maxL + math.Log(sum)
	top = top[:0]
	for i, l := range logits {
		lp := float32(float64(l) - lse)
		if len(top) < n {
			top = append(top, TokenLogprob{int32(i), lp})
			for j := len(top) - 1; j > 0 && top[j].Logprob > top[j-1].Logprob; j-- {
				top[j], top[j-1] = top[j-1], top[j]
			}
		} else if n > 0 && lp > top[n-1].Logprob {
			top[n-1] = TokenLogprob{int32(i), lp}
			for j := n - 1; j > 0 && top[j].Logprob > top[j-1].Logprob; j-- {
				top[j], top[j-1] = top[j-1], top[j]
			}
		}
	}
	return float32(float64(logits[id]) - lse), top
}

// TokenLogprob pairs a token with its log-probability.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}
