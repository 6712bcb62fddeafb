package engine

import (
	"fmt"

	"github.com/kvhost/kvhost/host/kv"
)

// seqKV is what one sequence holds of the pools: a page table per token
// pool (Set.TokenPools order) and a slot per state pool (Set.SlotPools
// order, -1 while it holds none). spare holds, per state pool, the slots a
// request of n choices reserved at admission for its n-1 forks.
type seqKV struct {
	tables [][]int32
	slots  []int32
	spare  [][]int32
}

// newSeqKV is an empty holding over e's pools.
func (e *Engine) newSeqKV() seqKV {
	k := seqKV{tables: make([][]int32, len(e.pools.TokenPools())), slots: make([]int32, len(e.pools.SlotPools())),
		spare: make([][]int32, len(e.pools.SlotPools()))}
	for i := range k.slots {
		k.slots[i] = -1
	}
	return k
}

// releaseKV gives back every page, slot and spare slot s holds.
func (e *Engine) releaseKV(s *seq) {
	for i, p := range e.pools.TokenPools() {
		p.Release(s.kv.tables[i])
		s.kv.tables[i] = nil
	}
	for i, p := range e.pools.SlotPools() {
		if s.kv.slots[i] >= 0 {
			p.Release(s.kv.slots[i])
			s.kv.slots[i] = -1
		}
		for _, sp := range s.kv.spare[i] {
			p.Release(sp)
		}
		s.kv.spare[i] = nil
	}
}

// slotsToAdmit is how many slots of each state pool s takes when admitted:
// its own and, before its prompt forks into n choices, the n-1 forks'.
func slotsToAdmit(s *seq) int {
	if !s.started {
		return max(s.req.N, 1)
	}
	return 1
}

// acquireSlots takes s's slots in every state pool at admission, all or
// none.
func (e *Engine) acquireSlots(s *seq) bool {
	pools := e.pools.SlotPools()
	n := slotsToAdmit(s)
	for _, p := range pools {
		if p.FreeSlots() < n {
			return false
		}
	}
	for i, p := range pools {
		for j := range n {
			sl, err := p.Acquire()
			if err != nil { // the engine goroutine is the only taker
				panic(fmt.Sprintf("engine: %s: a counted free slot vanished: %v", p, err))
			}
			if j == 0 {
				s.kv.slots[i] = sl
			} else {
				s.kv.spare[i] = append(s.kv.spare[i], sl)
			}
		}
	}
	return true
}

// pagesToAdmit is what s needs of each token pool to run its next step:
// pages for its tokens and the next one (a window pool's at most what one
// chunk over the window holds), less the cached pages it already shares.
func (e *Engine) pagesToAdmit(s *seq) []int {
	out := make([]int, len(e.pools.TokenPools()))
	for i, p := range e.pools.TokenPools() {
		held := 0
		for _, pg := range s.kv.tables[i] {
			if pg != kv.Released {
				held++
			}
		}
		out[i] = max(0, p.MaxPages(len(s.tokens)+1, e.chunk())-held)
	}
	return out
}

// chunk is the most tokens one forward adds to a sequence.
func (e *Engine) chunk() int {
	if e.cfg.ChunkedPrefill > 0 {
		return e.cfg.ChunkedPrefill
	}
	return e.ctxLen
}

// trimKV gives back the pages of s's window pools that no later query of s
// reads (positions before s.cached − window + 1), and once that is every
// page of the cached prefix s locks, s's hold on the prefix's window pages
// (radix.Tree.ReleaseWindow): the prefix cache may then reclaim them while
// s keeps running.
func (e *Engine) trimKV(s *seq) {
	windows, past := false, s.lock.Win()
	for i, p := range e.pools.TokenPools() {
		if w := p.Window(); w > 0 {
			p.Trim(s.kv.tables[i], s.cached-w+1)
			windows, past = true, past && s.cached-w+1 >= s.lock.Tokens()
		}
	}
	if windows && past {
		e.cache.ReleaseWindow(&s.lock)
	}
}

// growKV grows every page table of s to cover n tokens. A pool that cannot
// leaves its table unchanged (tables already grown keep their pages, which
// s needs anyway) and its error names the pool.
func (e *Engine) growKV(s *seq, n int) error {
	for i, p := range e.pools.TokenPools() {
		e.makeRoom(i, p.PagesFor(n)-len(s.kv.tables[i]))
		t, err := p.Grow(s.kv.tables[i], n)
		if err != nil {
			return fmt.Errorf("the KV pool %s cannot hold %d tokens: %w", p.Name(), n, err)
		}
		s.kv.tables[i] = t
	}
	return nil
}

// unshareKV gives s a private copy of the page holding position pos in
// every token pool where another sequence shares it (copy-on-write before
// the write).
func (e *Engine) unshareKV(s *seq, pos int) error {
	for i, p := range e.pools.TokenPools() {
		if p.Shared(s.kv.tables[i][pos/p.PageSize()]) {
			e.makeRoom(i, 1)
		}
		if err := p.Unshare(s.kv.tables[i], pos/p.PageSize(), e.kern); err != nil {
			return err
		}
	}
	return nil
}

// forkKV gives child parent's pages (shared, copy-on-write) and one of the
// slots parent reserved for its forks, holding a copy of parent's state.
func (e *Engine) forkKV(parent, child *seq) error {
	child.kv = e.newSeqKV()
	for i, p := range e.pools.TokenPools() {
		child.kv.tables[i] = p.Share(parent.kv.tables[i])
	}
	for i, p := range e.pools.SlotPools() {
		sp := parent.kv.spare[i]
		if len(sp) == 0 {
			return fmt.Errorf("engine: %s: no slot reserved for choice %d", p, child.choice)
		}
		child.kv.slots[i], parent.kv.spare[i] = sp[len(sp)-1], sp[:len(sp)-1]
		if err := p.Copy(e.kern, parent.kv.slots[i], child.kv.slots[i]); err != nil {
			return err
		}
	}
	return nil
}

// tooSmall names the first token pool that cannot hold a request of
// prompt tokens and n choices of maxTokens each when it is empty, with the
// tokens the request needs of it and what it holds; "" when every one can.
func (e *Engine) tooSmall(prompt, n, maxTokens int) (pool string, need, capacity int) {
	for _, p := range e.pools.TokenPools() {
		// The prompt's pages are shared by the choices; each choice adds
		// its own tokens plus a copy of the shared partial page.
		need := prompt + n*(maxTokens+p.PageSize())
		if p.Window() > 0 {
			need = min(need, n*p.MaxPages(prompt+maxTokens, e.chunk())*p.PageSize())
		}
		if need > p.Tokens() {
			return p.Name(), need, p.Tokens()
		}
	}
	return "", 0, 0
}

// capacityError is nil when a request of prompt tokens, n choices of
// maxTokens each, fits the pools when they are empty; otherwise it names
// the pool that is too small.
func (e *Engine) capacityError(prompt, n, maxTokens int) *InvalidRequestError {
	if pool, need, capacity := e.tooSmall(prompt, n, maxTokens); pool != "" {
		return &InvalidRequestError{Field: "max_tokens", Problem: fmt.Sprintf("prompt plus max_tokens is %d tokens, more than the whole KV pool %s holds (%d)", need, pool, capacity)}
	}
	for _, p := range e.pools.SlotPools() {
		if n > p.Slots() {
			return &InvalidRequestError{Field: "n", Problem: fmt.Sprintf("%d choices need %d state slots, the pool %s has %d", n, n, p.Name(), p.Slots())}
		}
	}
	return nil
}
