// Package kv holds the shared paged KV pool every sequence's cache lives in.
//
// The pool is one arena per layer for K and one for V, carved into pages of
// PageSize token slots. Sequences own pages through their page tables; there
// is no per-slot split of the context, so a short request never reserves a
// long request's worth of memory. Page ownership is the invariant: a page is
// either on the free list or in exactly one page table, and FreePages
// returns it. Tests and the engine's shutdown check FreeCount() == NumPages.
package kv
