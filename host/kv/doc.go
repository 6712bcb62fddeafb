// Package kv realises the KV pools a configurator plugin declares, and
// nothing else: the host computes no cell size. A declaration (sdk.Pool
// values, through plugin.Layout) is verified against what the model's
// layers keep (LayerNeed) by NewLayout, sized in units per pool by the
// plugin, and allocated by Allocate (one allocation per buffer) or Over
// (views of an arena someone else owns) into a Set.
//
// Kinds (sdk.PoolKind): full-attention, sliding-window and MLA-latent pools
// hold tokens in pages (Pool: page tables, reference counts, copy-on-write
// Share/Unshare for the n choices of a request, and Trim for a window pool
// to give back pages that fall out of the window); recurrent-state pools
// hold one slot per running request (SlotPool). A sequence holds one page
// table per token pool and one slot per state pool, in the Set's order.
//
// Invariants:
//   - Every buffer holds exactly units × its declared bytes per unit, and
//     every attention buffer's bytes per token equal what the layer's KV
//     encoding (device.KVDType, named by the buffers' dtypes) needs; a
//     declaration that disagrees is refused, never trusted.
//   - Every model layer that keeps a cache is served by exactly one pool of
//     a kind that fits it (a window pool only for a layer whose window it
//     covers, a latent pool only for MLA).
//   - A page is either on its pool's free list or held by the page tables
//     its reference count says; a slot is free or held by one sequence.
//     Tests and the engine's shutdown check that every page and slot comes
//     back.
package kv
