package sampling

import (
	"math"
	"slices"
)

// TokenBias is one logit-bias entry (OpenAI's logit_bias).
type TokenBias struct {
	Token int32
	Bias  float32
}

// NormalizeBias turns a request's logit_bias into the sorted, de-duplicated
// form SeqState.Bias wants. Call it once per request, not per step.
func NormalizeBias(m map[int32]float32) []TokenBias {
	out := make([]TokenBias, 0, len(m))
	for t, b := range m {
		out = append(out, TokenBias{t, b})
	}
	slices.SortFunc(out, func(a, b TokenBias) int { return int(a.Token) - int(b.Token) })
	return out
}

// touch is a token whose logit a pre-op changed: its adjusted value.
type touch struct {
	id int32
	v  float32
}

// rowScratch is one row's working memory, reused across steps.
type rowScratch struct {
	gen     []int32
	pen     []touch
	touched []touch
	heapV   []float32
	heapI   []int32
}

// adjust builds the sorted list of tokens whose logits the penalty and
// bias pre-ops change, with their new values; the row is never copied or
// modified. Penalties (vLLM's rules, see the package doc): a token of the
// prompt or of Generated has its logit divided by the repetition penalty
// when positive, multiplied when not; a token of Generated then loses
// count·frequency + presence. Bias entries add to the result.
func (s *rowScratch) adjust(row []float32, seq *SeqState, hp *hostParams, penalties, bias bool) []touch {
	s.pen = s.pen[:0]
	rep := penalties && hp.repetition != 1
	if penalties && (len(seq.Generated) > 0 || rep && len(seq.Prompt) > 0) && (rep || hp.frequency != 0 || hp.presence != 0) {
		s.gen = append(s.gen[:0], seq.Generated...)
		slices.Sort(s.gen)
		prompt := seq.Prompt
		if !rep {
			prompt = nil // only the repetition penalty reads the prompt
		}
		for i := 0; i < len(s.gen) || len(prompt) > 0; {
			// The next token of the merged, sorted lists and how many
			// times it was generated.
			var id int32
			j := i
			if i < len(s.gen) && (len(prompt) == 0 || s.gen[i] <= prompt[0]) {
				id = s.gen[i]
				for j < len(s.gen) && s.gen[j] == id {
					j++
				}
			} else {
				id = prompt[0]
			}
			for len(prompt) > 0 && prompt[0] == id {
				prompt = prompt[1:]
			}
			count := j - i
			i = j
			if id < 0 || int(id) >= len(row) {
				continue
			}
			l := row[id]
			if rep {
				if l > 0 {
					l /= hp.repetition
				} else {
					l *= hp.repetition
				}
			}
			if count > 0 {
				l -= float32(count)*hp.frequency + hp.presence
			}
			s.pen = append(s.pen, touch{id, l})
		}
	}
	s.touched = s.touched[:0]
	if !bias || len(seq.Bias) == 0 {
		return s.pen
	}
	p := s.pen
	for _, b := range seq.Bias {
		if b.Token < 0 || int(b.Token) >= len(row) {
			continue
		}
		for len(p) > 0 && p[0].id < b.Token {
			s.touched = append(s.touched, p[0])
			p = p[1:]
		}
		v := row[b.Token]
		if len(p) > 0 && p[0].id == b.Token {
			v = p[0].v
			p = p[1:]
		}
		if n := len(s.touched); n > 0 && s.touched[n-1].id == b.Token {
			s.touched[n-1].v += b.Bias // duplicate bias entries add up
			continue
		}
		s.touched = append(s.touched, touch{b.Token, v + b.Bias})
	}
	return append(s.touched, p...)
}

// worse orders heap entries: lower value, then higher id, is worse.
func worse(v1 float32, i1 int32, v2 float32, i2 int32) bool {
	return v1 < v2 || v1 == v2 && i1 > i2
}

// topK writes the k best (value, id) of row — adjusted by touched, sorted
// by id — into ids and vals in descending order (ties: lower id first) and
// returns how many there are (fewer than k only for a short row). NaN
// logits are never chosen. The row is read once, never copied.
func (s *rowScratch) topK(row []float32, touched []touch, k int, ids []int32, vals []float32) int {
	if cap(s.heapV) < k {
		s.heapV, s.heapI = make([]float32, k), make([]int32, k)
	}
	hv, hi := s.heapV[:k], s.heapI[:k]
	n := 0
	push := func(v float32, id int32) {
		if n < k {
			i := n
			n++
			for i > 0 {
				p := (i - 1) / 2
				if !worse(v, id, hv[p], hi[p]) {
					break
				}
				hv[i], hi[i] = hv[p], hi[p]
				i = p
			}
			hv[i], hi[i] = v, id
			return
		}
		siftDown(hv, hi, n, v, id)
	}
	scan := func(seg []float32, base int) {
		for i, v := range seg {
			if n == k {
				if v < hv[0] || v == hv[0] && int32(base+i) > hi[0] || v != v {
					continue
				}
			} else if v != v {
				continue
			}
			push(v, int32(base+i))
		}
	}
	pos := 0
	for _, t := range touched {
		scan(row[pos:t.id], pos)
		if t.v == t.v && (n < k || !worse(t.v, t.id, hv[0], hi[0])) {
			push(t.v, t.id)
		}
		pos = int(t.id) + 1
	}
	scan(row[pos:], pos)
	// Pop the worst first into the back: descending order.
	for m := n; m > 0; m-- {
		vals[m-1], ids[m-1] = hv[0], hi[0]
		if m > 1 {
			siftDown(hv, hi, m-1, hv[m-1], hi[m-1])
		}
	}
	return n
}

// siftDown replaces the root of the n-element min-heap with (v, id).
func siftDown(hv []float32, hi []int32, n int, v float32, id int32) {
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && worse(hv[c+1], hi[c+1], hv[c], hi[c]) {
			c++
		}
		if !worse(hv[c], hi[c], v, id) {
			break
		}
		hv[i], hi[i] = hv[c], hi[c]
		i = c
	}
	hv[i], hi[i] = v, id
}

// logSoftmax writes the log-softmax of vals[:n] into lp[:n] (float64 sums).
func logSoftmax(vals, lp []float32, n int) {
	mx := float64(vals[0])
	var s float64
	for _, v := range vals[:n] {
		s += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(s)
	for i, v := range vals[:n] {
		lp[i] = float32(float64(v) - lse)
	}
}

// candidates runs the pre-ops for one row and writes its candidates (ids,
// logits, log-softmax over the survivors) in descending order; it returns
// how many survive (at least 1 for a non-empty row).
func (s *rowScratch) candidates(row []float32, seq *SeqState, hp *hostParams, ops preOps, k int, ids []int32, logits, lp []float32) int {
	touched := s.adjust(row, seq, hp, ops.penalties, ops.bias)
	if ops.temperature && hp.temperature == 0 {
		k = 1
	}
	n := s.topK(row, touched, k, ids, logits)
	if n == 0 {
		return 0
	}
	// Masked (-Inf) candidates never survive unless nothing else does.
	for n > 1 && math.IsInf(float64(logits[n-1]), -1) {
		n--
	}
	if ops.temperature && hp.temperature > 0 && hp.temperature != 1 {
		inv := 1 / float64(hp.temperature)
		for i := range n {
			logits[i] = float32(float64(logits[i]) * inv)
		}
	}
	logSoftmax(logits, lp, n)
	cut := n
	if ops.topK && hp.topK > 0 && hp.topK < cut {
		cut = hp.topK
	}
	if ops.minP && hp.minP > 0 {
		floor := lp[0] + float32(math.Log(float64(hp.minP)))
		m := 1
		for m < cut && lp[m] >= floor {
			m++
		}
		cut = m
	}
	if ops.topP && hp.topP > 0 && hp.topP < 1 {
		var total, acc float64
		for i := range cut {
			total += math.Exp(float64(lp[i]))
		}
		for i := range cut {
			acc += math.Exp(float64(lp[i]))
			if acc >= float64(hp.topP)*total {
				cut = i + 1
				break
			}
		}
	}
	if cut != n {
		n = cut
		logSoftmax(logits, lp, n)
	}
	return n
}
