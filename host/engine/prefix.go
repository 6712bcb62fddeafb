package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/radix"
	"github.com/kvhost/kvhost/sdk"
)

// Policy orders the waiting queue at admission (SGLang's --schedule-policy).
type Policy string

const (
	// FCFS admits in arrival order (a preempted sequence first).
	FCFS Policy = "fcfs"
	// LPM admits the request with the longest cached prefix first (ties in
	// arrival order), so requests sharing a prefix run while it is cached.
	// Like SGLang's, it looks at the first lpmWindow waiting requests and
	// may delay a request without a cached prefix while others keep hitting.
	LPM Policy = "lpm"
)

// Policies are the accepted Config.Policy values ("" means FCFS).
var Policies = []Policy{FCFS, LPM}

// lpmWindow bounds how many waiting requests LPM scores per admission
// (SGLang stops scoring past 128 waiting requests and falls back to FCFS).
const lpmWindow = 128

// PrefixStats is the prefix cache's counters and contents.
type PrefixStats = radix.Usage

// KVEvents hears what the prefix cache stores and removes, with its block
// digests, on the engine goroutine; EndStep closes one step's batch (events'
// Publisher).
type KVEvents interface {
	radix.Observer
	Hash(parent *radix.Digest, block []int32) radix.Digest
	EndStep()
}

// poolOwner lets the tree hold pages of the engine's token pools: tree pool
// i is kv.Set.TokenPools()[i].
type poolOwner []*kv.Pool

var _ radix.Owner = poolOwner(nil)

func (o poolOwner) Shared(i int, pg int32) bool { return o[i].Shared(pg) }
func (o poolOwner) Retain(i int, pages []int32) { o[i].Retain(pages) }
func (o poolOwner) Release(i int, pages []int32) {
	o[i].Release(pages)
}

// newPrefixCache builds the tree over pools' token pools, or nil when the
// pools keep recurrent state: this engine hands the tree no state
// snapshots, and a tree with state pools and no snapshots caches nothing
// (radix's doc), so such models run without a prefix cache.
func newPrefixCache(pools *kv.Set, ev KVEvents) (*radix.Tree, error) {
	if len(pools.SlotPools()) > 0 {
		return nil, nil
	}
	var rp []radix.Pool
	for _, p := range pools.TokenPools() {
		d := radix.Pool{Name: p.Name(), Kind: radix.Full, PageSize: p.PageSize()}
		if p.Kind() == sdk.SlidingWindow {
			d.Kind, d.Window = radix.Window, p.Window()
		}
		rp = append(rp, d)
	}
	cfg := radix.Config{Pools: rp, Owner: poolOwner(pools.TokenPools())}
	if ev != nil {
		cfg.Hash, cfg.Observer = ev.Hash, ev
	}
	t, err := radix.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("engine: prefix cache: %w", err)
	}
	return t, nil
}

// matchable is how much of s's tokens a cached prefix may cover: all but
// the last (whose logits the forward must produce), none for an embedding
// (every position's hidden state is wanted) and, before the first token,
// none past the first position whose logits score a wanted prompt token.
func matchable(s *seq) int {
	if s.req.Embed {
		return 0
	}
	n := len(s.tokens) - 1
	if s.req.PromptLogprobs && !s.started {
		n = min(n, max(0, s.req.PromptLogprobStart-1))
	}
	return n
}

// caches reports whether s takes part in the prefix cache: every sequence
// when the cache is on, except Warmup's, which leaves it as it found it.
func (e *Engine) caches(s *seq) bool { return e.cache != nil && !s.warmup }

// attachPrefix gives s, which holds no pages, the longest cached prefix of
// its tokens: its tables share the prefix's pages, it locks the prefix and
// its computation starts after it.
func (e *Engine) attachPrefix(s *seq) {
	if !e.caches(s) {
		return
	}
	s.fresh = true
	e.cache.Match(s.tokens[:matchable(s)], &e.match)
	if e.match.Tokens == 0 {
		return
	}
	for i, p := range e.pools.TokenPools() {
		if len(s.kv.tables[i]) != 0 {
			panic(fmt.Sprintf("engine: a waiting sequence holds %d pages of %s", len(s.kv.tables[i]), p))
		}
		s.kv.tables[i] = p.Share(e.match.Pages[i])
	}
	s.lock = e.cache.Lock(&e.match)
	s.cached = e.match.Tokens
	e.trimKV(s) // the prefix's window pages before s's window are not s's to hold
}

// detachPrefix undoes attachPrefix for a sequence that is not admitted
// after all.
func (e *Engine) detachPrefix(s *seq) {
	if e.cache == nil {
		return
	}
	e.releaseKV(s)
	e.cache.Unlock(s.lock)
	s.lock, s.cached = radix.Handle{}, 0
}

// countAdmission records an admitted sequence's prefix-cache query.
func (e *Engine) countAdmission(s *seq) {
	if !e.caches(s) {
		return
	}
	e.prefixQueries.Add(int64(len(s.tokens)))
	e.prefixHits.Add(int64(s.cached))
	s.firstRun = s.scheduled.IsZero()
	if s.firstRun {
		s.hit = min(s.cached, s.prompt)
	}
}

// awaitPrefix reports whether s, the i-th running sequence, which has
// computed nothing past its cached prefix since admission, waits this step
// for an earlier running sequence still prefilling a longer prefix s
// shares (whole blocks s may match): that sequence caches its blocks chunk
// by chunk (cachePrefix), and s takes them (joinPrefix) once it has passed
// them or stopped prefilling, instead of computing the same prefix beside
// it. A sequence that does not wait joins whatever the tree caches now
// (once: its first chunk ends its freshness). Only earlier sequences are
// waited for, and they get the step's budget first, so the oldest of a
// group always runs: nobody waits in a cycle. A waiting sequence holds no
// pages past its cached prefix, and preemption may still take it.
func (e *Engine) awaitPrefix(s *seq, i int) bool {
	if !e.caches(s) || !s.fresh {
		return false
	}
	want := s.tokens[:matchable(s)]
	blk := e.cache.Block()
	for _, o := range e.running[:i] {
		if o.done || o.prefilled {
			continue
		}
		c := commonPrefix(want, o.tokens) / blk * blk
		if c > s.cached && o.cached < c {
			return true
		}
	}
	e.joinPrefix(s)
	return false
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// joinPrefix moves s, which has computed nothing since admission, onto
// the longest cached prefix now in the tree (longer than at admission when
// another sequence cached its prefill meanwhile): its tables share the new prefix's pages in place of the old
// (and of any page a failed reserve left), its lock moves, and the extra
// tokens count as prefix-cache hits.
func (e *Engine) joinPrefix(s *seq) {
	e.cache.Match(s.tokens[:matchable(s)], &e.match)
	if e.match.Tokens <= s.cached {
		return
	}
	for i, p := range e.pools.TokenPools() {
		p.Release(s.kv.tables[i])
		s.kv.tables[i] = p.Share(e.match.Pages[i])
	}
	old := s.lock
	s.lock = e.cache.Lock(&e.match)
	e.cache.Unlock(old)
	e.prefixHits.Add(int64(e.match.Tokens - s.cached))
	s.cached = e.match.Tokens
	e.trimKV(s)
	if s.firstRun {
		s.hit = min(s.cached, s.prompt)
	}
}

// cachePrefix inserts the whole blocks s has computed into the tree and
// moves s's lock to the prefix the insert ends at (which covers the pages
// the tree adopted from s): after every chunk of a prefill, so that
// requests with the same prefix share it while s still runs (and those
// waiting for it, awaitPrefix, take it as soon as s has passed it).
func (e *Engine) cachePrefix(s *seq) {
	if !e.caches(s) || s.cached < e.cache.Block() || s.cached/e.cache.Block()*e.cache.Block() <= s.lock.Tokens() {
		return
	}
	h := e.cache.Insert(s.tokens[:s.cached], s.kv.tables, nil)
	e.cache.Relock(h)
	e.cache.Unlock(s.lock)
	s.lock = h
	e.dedup(s, h.Tokens())
}

// dedup moves s onto the cache's pages where it computed blocks the cache
// already held (a request that prefilled the same prefix concurrently with
// another): its duplicates go back to the pool, as SGLang does after an
// insert, so a lock never pins pages no sequence reads. The blocks lie
// before s.cached and are never written again; s's lock covers them.
func (e *Engine) dedup(s *seq, tokens int) {
	e.cache.Match(s.tokens[:tokens], &e.match)
	for i, p := range e.pools.TokenPools() {
		table := s.kv.tables[i]
		for j, pg := range e.match.Pages[i] {
			if pg == kv.Released || table[j] == pg || table[j] == kv.Released {
				continue
			}
			p.Retain(e.match.Pages[i][j : j+1])
			p.Release(table[j : j+1])
			table[j] = pg
		}
	}
}

// uncache is s leaving the running set (finished or preempted): when its
// KV is sound its computed blocks are inserted, then its lock is dropped.
// The sequence's own page references are releaseKV's to drop.
func (e *Engine) uncache(s *seq, sound bool) {
	if !e.caches(s) {
		return
	}
	if sound && s.cached >= e.cache.Block() {
		e.cache.Insert(s.tokens[:s.cached], s.kv.tables, nil)
	}
	e.cache.Unlock(s.lock)
	s.lock = radix.Handle{}
}

// soundEnd reports whether a sequence ending with err still has valid KV
// for the tokens it counts as cached (it was cancelled or shut down, not
// failed mid-step).
func soundEnd(err error) bool {
	return err == nil || errors.Is(err, errCancelled) || errors.Is(err, ErrShuttingDown)
}

// makeRoom evicts unlocked cached prefixes until token pool i has want
// free pages, or nothing unlocked is left: the cache gives way before any
// running sequence is preempted.
func (e *Engine) makeRoom(i, want int) {
	if e.cache == nil || want <= 0 {
		return
	}
	if short := want - e.pools.TokenPools()[i].FreePages(); short > 0 {
		e.cache.Evict(i, short)
	}
}

// available is what token pool i can give a newcomer: its free pages and
// the cached pages no running sequence locks.
func (e *Engine) available(i int) int {
	n := e.pools.TokenPools()[i].FreePages()
	if e.cache != nil {
		n += e.cache.Evictable(i)
	}
	return n
}

// orderByPrefix sorts the first lpmWindow waiting requests by their cached
// prefix, longest first (stable: arrival order among equals).
func (e *Engine) orderByPrefix() {
	if e.cache == nil || len(e.waiting) < 2 {
		return
	}
	head := e.waiting[:min(len(e.waiting), lpmWindow)]
	for _, s := range head {
		e.cache.Match(s.tokens[:matchable(s)], &e.match)
		s.score = e.match.Tokens
	}
	slices.SortStableFunc(head, func(a, b *seq) int { return b.score - a.score })
}

// ResetPrefixCache empties the prefix cache (vLLM's /reset_prefix_cache),
// returning its pages to the pools. It runs on the engine's goroutine
// between steps and refuses (radix.ErrLocked) while running sequences hold
// cached prefixes.
func (e *Engine) ResetPrefixCache(ctx context.Context) error {
	if e.cache == nil {
		return ErrNoPrefixCache
	}
	reply := make(chan error, 1)
	select {
	case e.resets <- reply:
	case <-e.done:
		return ErrShuttingDown
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrNoPrefixCache: the engine runs without a prefix cache.
var ErrNoPrefixCache = errors.New("engine: the prefix cache is off")

// serveResets answers pending ResetPrefixCache calls (engine goroutine).
func (e *Engine) serveResets() {
	for {
		select {
		case reply := <-e.resets:
			reply <- e.resetCache()
		default:
			return
		}
	}
}

// resetCache empties the cache and publishes the AllBlocksCleared event
// before anyone hears that it is done.
func (e *Engine) resetCache() error {
	err := e.cache.Reset()
	if e.cfg.KVEvents != nil {
		e.cfg.KVEvents.EndStep()
	}
	return err
}

// PrefixCache is the prefix cache's statistics, nil when it is off.
func (e *Engine) PrefixCache() *PrefixStats {
	if e.cache == nil {
		return nil
	}
	return &PrefixStats{Queries: e.prefixQueries.Load(), Hits: e.prefixHits.Load(), Block: e.cache.Block(), Stats: e.cache.Stats()}
}
