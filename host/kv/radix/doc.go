// Package radix is the prefix cache: a radix tree of token sequences whose
// nodes hold the KV pages (and recurrent-state snapshots) of every pool of
// a model, so that a request sharing a prefix with an earlier or running
// one starts after it instead of recomputing it (SGLang's RadixAttention,
// vLLM's automatic prefix caching).
//
// The tree knows pools only as int32 page ids and slot ids behind a small
// Owner interface (Retain, Release: kv.Pool.Share and kv.Pool.Release, or
// kv.SlotPool.Release for a snapshot), so it imports no pool code; the
// engine's scheduler goroutine owns it, as it owns the sequences' tables.
//
// # Granularity
//
// Keys are whole blocks: the least common multiple of the token pools'
// page sizes (Tree.Block; the page size when the pools agree). A partial
// last block is never cached: Insert caches the whole blocks and the
// sequence keeps the rest; a later request whose prompt matches into that
// block recomputes its tokens (vLLM caches full blocks only; SGLang's paged
// tree the same). So a hit that ends mid-page is served up to the page
// boundary before it, and the first page a hit sequence writes is always a
// fresh one of its own: no cached page is ever written, and no
// copy-on-write is needed for a hit. The caller matches prompt[:len−1]
// (Match's doc): the last prompt token is always computed for its logits.
//
// # What each pool kind keeps
//
//   - Full (full attention, MLA latent): every page of a cached prefix.
//   - Window (sliding window W): what sequences still held when they were
//     inserted; pages a sequence gave back because they fell out of its
//     window (Released entries) are holes, filled when a later insert holds
//     that page. A prefix of length L is reusable with a window pool only
//     if the tree holds that pool's pages covering positions L−W+1 … L−1
//     (all of 0 … L−1 when L ≤ W). Since a running sequence trims its
//     window as it goes, the reusable boundaries are in practice the ends
//     of inserted prompts and sequences (their last W tokens are held) and
//     every boundary of prefixes shorter than W. A locked prefix keeps only
//     the window pages its holders' windows read (the last W tokens before
//     each holder's end, none once the holder has decoded a window past
//     it: Tree.ReleaseWindow); the rest are spare, counted as evictable,
//     and Evict turns them into holes when the pool is short (SGLang's
//     SWA radix cache tombstones the same pages), so a running sequence
//     pins at most its window of a window pool, cache on or off.
//   - State (recurrent Mamba/GDN state): a snapshot slot holding the state
//     after a node's last token, given by Insert (the caller copies its
//     state into a fresh slot and hands it over); as in SGLang's Mamba
//     radix cache a prefix is reusable only at a node end with a snapshot
//     for every state pool, and the hit sequence copies the snapshot into
//     its own slot. A caller that passes no snapshots caches nothing for a
//     model with state pools (Insert stores no prefix it cannot serve), so
//     phase 2 may also leave such models uncached.
//
// # Ownership and reference counts
//
//   - The tree holds one pool reference on every page id it stores (taken
//     with Owner.Retain at Insert) and owns its snapshot slots outright;
//     a running sequence holds its own reference on every page of its
//     tables, hit pages included (it Shares them from the Prefix). A page
//     therefore returns to its pool's free list only when the tree has
//     evicted it and no sequence holds it.
//   - Lock counts: a running sequence locks the prefix it holds pages of
//     (Lock after Match; after Insert, Relock the returned Handle and
//     Unlock the old one; a fork Relocks its parent's Handle). A node's
//     lock is the number of locks on it or below it; Handles stay valid
//     across splits (a split node keeps its lock and gives its parent an
//     equal one). Protocol invariant: every page a running sequence shares
//     with the tree lies on a path it has locked, so every page of an
//     unlocked node is held by the tree alone, and Stats.Evictable is
//     exactly what Evict can return to the free lists (a window pool's
//     spare pages as of the last Refresh).
//   - Preemption releases the sequence's references (its tables) and its
//     lock, never the tree's: cached pages stay cached and, unless evicted
//     meanwhile, the preempted sequence hits them when it is readmitted.
//
// # Eviction order
//
// Evict removes unlocked leaves least recently used first (a node's time
// is that of the last Lock, Unlock or Insert through it, so a parent is
// never older than its children), releasing every page and snapshot of the
// leaf in every pool; a parent left a leaf becomes a candidate in turn. In
// a tree with state pools a leaf without snapshots is useless (no sequence
// can resume in it) and is removed as soon as nothing locks it.
//
// # Events
//
// With Config.Hash every block carries a chained digest (vLLM's block
// hash), and Config.Observer hears BlocksStored for each new leaf (its
// blocks, parent digest and tokens), BlocksRemoved for each evicted node
// and AllCleared on Reset: what package events publishes to KV-aware
// routers. Filling a window hole stores no new block and says nothing.
package radix
