package radix

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Kind says what a pool keeps of a cached prefix.
type Kind uint8

const (
	// Full keeps every page of a prefix: full-attention and MLA-latent
	// pools.
	Full Kind = iota + 1
	// Window keeps the pages a sliding window of Window tokens reads;
	// pages a sequence gave back (Released entries of its table) are holes.
	Window
	// State keeps one recurrent-state snapshot slot at a node's end.
	State
)

func (k Kind) String() string {
	switch k {
	case Full:
		return "full"
	case Window:
		return "window"
	case State:
		return "state"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Released marks a page-table entry a sliding-window pool gave back; it is
// the value of kv.Released, so sequences' tables pass through unchanged.
const Released int32 = -1

// MaxBlock bounds the tree's block (the least common multiple of the token
// pools' page sizes), in tokens.
const MaxBlock = 1 << 16

// Pool describes one pool of the model, in the order the tree's page
// tables, snapshots and callbacks index them (kv.Set's declaration order is
// the natural one).
type Pool struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// PageSize is the tokens of one page (Full and Window pools).
	PageSize int `json:"page_size,omitempty"`
	// Window is the sliding window in tokens (Window pools): a query at
	// position p reads positions p−Window+1 … p.
	Window int `json:"window,omitempty"`
}

func (p Pool) tokens() bool { return p.Kind == Full || p.Kind == Window }

// Owner is what holds the pages and slots the tree refers to: the KV pools.
// Retain and Release skip Released entries, as kv.Pool's do.
type Owner interface {
	// Shared reports whether more than one page table holds page pg of
	// token pool pool (kv.Pool.Shared): Insert adopts no page another
	// sequence also holds.
	Shared(pool int, pg int32) bool
	// Retain takes one more hold on each page of token pool pool (the
	// tree's own, beside the sequence's): kv.Pool.Share.
	Retain(pool int, pages []int32)
	// Release drops one hold on each page of a token pool (kv.Pool.Release:
	// the page returns to the free list when no holder is left), or gives
	// back snapshot slots of a state pool (kv.SlotPool.Release).
	Release(pool int, ids []int32)
}

// Digest is a block's chained hash (vLLM's block hash: the hash of the
// parent block's digest and the block's tokens).
type Digest = [32]byte

// Hasher computes a block's digest from its parent's (nil for the first
// block of a sequence) and its tokens.
type Hasher func(parent *Digest, block []int32) Digest

// Observer hears the blocks the tree stores and removes, in order, on the
// goroutine that changes the tree (the KV events publisher). Slices are
// only valid during the call.
type Observer interface {
	// BlocksStored: blocks (one digest per block of tokens) were stored
	// after the block whose digest is parent (nil: they start a sequence).
	BlocksStored(parent *Digest, blocks []Digest, tokens []int32)
	// BlocksRemoved: the blocks were evicted.
	BlocksRemoved(blocks []Digest)
	// AllCleared: every block was removed (Reset).
	AllCleared()
}

// Config is what a tree needs.
type Config struct {
	Pools []Pool
	Owner Owner
	// Hash, when set, gives every block a digest (needed by Observer).
	Hash Hasher
	// Observer, when set, hears stores and removals.
	Observer Observer
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	if len(c.Pools) == 0 {
		return fmt.Errorf("radix: no pools")
	}
	if c.Owner == nil {
		return fmt.Errorf("radix: Owner is nil")
	}
	if c.Observer != nil && c.Hash == nil {
		return fmt.Errorf("radix: an Observer needs a Hash (events name blocks by digest)")
	}
	for i, p := range c.Pools {
		switch p.Kind {
		case Full, Window:
			if p.PageSize < 1 || p.PageSize > MaxBlock {
				return fmt.Errorf("radix: pool %d (%s): page_size %d, want 1..%d tokens", i, p.Name, p.PageSize, MaxBlock)
			}
			if p.Kind == Window && (p.Window < 1 || p.Window > 1<<30) {
				return fmt.Errorf("radix: pool %d (%s): window %d, want 1..%d tokens", i, p.Name, p.Window, 1<<30)
			}
			if p.Kind == Full && p.Window != 0 {
				return fmt.Errorf("radix: pool %d (%s): window %d on a full pool (want 0)", i, p.Name, p.Window)
			}
		case State:
			if p.PageSize > 1 || p.Window != 0 {
				return fmt.Errorf("radix: pool %d (%s): a state pool has no page_size (%d) or window (%d)", i, p.Name, p.PageSize, p.Window)
			}
		default:
			return fmt.Errorf("radix: pool %d (%s): kind %d, want full (1), window (2) or state (3)", i, p.Name, p.Kind)
		}
	}
	if b := blockOf(c.Pools); b > MaxBlock {
		return fmt.Errorf("radix: the page sizes' least common multiple is %d tokens, more than %d", b, MaxBlock)
	}
	return nil
}

// blockOf is the least common multiple of the token pools' page sizes (1
// when there is none).
func blockOf(pools []Pool) int {
	b := 1
	for _, p := range pools {
		if p.tokens() {
			b = b / gcd(b, p.PageSize) * p.PageSize
			if b > MaxBlock {
				return b
			}
		}
	}
	return b
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ErrLocked means Reset found prefixes running sequences still hold.
var ErrLocked = errors.New("radix: cached prefixes are locked by running sequences")

// Tree is the prefix cache of one model's pools. It is not safe for
// concurrent use: one goroutine (the engine's scheduler, which owns the
// sequences' page tables) calls every method but Stats, which any goroutine
// may call.
type Tree struct {
	pools   []Pool
	owner   Owner
	hash    Hasher
	obs     Observer
	block   int
	states  bool // some pool is a State pool
	windows bool // some pool is a Window pool

	root  *node
	clock uint64 // logical time of the last access
	gen   uint64 // structure version: a Prefix is valid for one
	heap  evictHeap
	one   [1]int32 // scratch for single-slot releases
	// locked and walk are lockedNodes' scratch (window.go).
	locked, walk []*node

	stats counters
}

// counters are the tree's totals, kept as it changes and read by Stats.
type counters struct {
	nodes, tokens, evictTokens atomic.Int64
	held, evictable            []atomic.Int64 // per pool: pages (slots) the tree holds, and those in unlocked nodes
	spare                      []atomic.Int64 // per window pool: locked nodes' pages no window reads (window.go)
}

// New builds an empty tree over cfg's pools.
func New(cfg Config) (*Tree, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tree{pools: append([]Pool(nil), cfg.Pools...), owner: cfg.Owner, hash: cfg.Hash, obs: cfg.Observer, block: blockOf(cfg.Pools)}
	for _, p := range t.pools {
		t.states = t.states || p.Kind == State
		t.windows = t.windows || p.Kind == Window
	}
	t.stats.spare = make([]atomic.Int64, len(t.pools))
	t.stats.held = make([]atomic.Int64, len(t.pools))
	t.stats.evictable = make([]atomic.Int64, len(t.pools))
	t.root = t.newNode(nil, nil, 0)
	return t, nil
}

// Block is the tree's granularity in tokens: every cached prefix is a
// whole number of blocks (the page sizes' least common multiple).
func (t *Tree) Block() int { return t.block }

// Pools are the pools the tree was built over.
func (t *Tree) Pools() []Pool { return append([]Pool(nil), t.pools...) }

// Stats is what the tree caches now.
type Stats struct {
	Nodes int `json:"nodes"`
	// Tokens is the tokens of every cached prefix node; EvictableTokens
	// those no running sequence locks.
	Tokens          int `json:"tokens"`
	EvictableTokens int `json:"evictable_tokens"`
	// Pages, per pool, is the pages (snapshot slots for a state pool) the
	// tree holds; Evictable those in unlocked nodes, and a window pool's
	// spare pages in locked ones as of the last Refresh (window.go): what
	// Evict can free.
	Pages     []int `json:"pages"`
	Evictable []int `json:"evictable"`
}

// Usage is what a user of the tree reports of it (the engine's stats,
// metrics, /v1/memory): its hit counters and what it caches now.
type Usage struct {
	// Queries is the tokens of every sequence looked up at admission, Hits
	// those served from the cache (vLLM's prefix_cache_queries and
	// prefix_cache_hits, in tokens).
	Queries int64 `json:"queries_tokens"`
	Hits    int64 `json:"hits_tokens"`
	// Block is the tree's granularity in tokens.
	Block int `json:"block_tokens"`
	Stats
}

// Stats reads the totals; safe from any goroutine (each figure is exact,
// the set is read without a lock while the tree may change).
func (t *Tree) Stats() Stats {
	s := Stats{Nodes: int(t.stats.nodes.Load()), Tokens: int(t.stats.tokens.Load()), EvictableTokens: int(t.stats.evictTokens.Load()),
		Pages: make([]int, len(t.pools)), Evictable: make([]int, len(t.pools))}
	for i := range t.pools {
		s.Pages[i] = int(t.stats.held[i].Load())
		s.Evictable[i] = int(t.stats.evictable[i].Load() + t.stats.spare[i].Load())
	}
	return s
}

// Evictable is Stats().Evictable[pool] without the copy: what Evict(pool,
// ·) can free (a window pool's spare pages as of the last Refresh).
func (t *Tree) Evictable(pool int) int {
	return int(t.stats.evictable[pool].Load() + t.stats.spare[pool].Load())
}

// tick advances the logical clock.
func (t *Tree) tick() uint64 {
	t.clock++
	return t.clock
}
