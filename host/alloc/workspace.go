package alloc

import (
	"fmt"
	"sort"
	"sync"

	"github.com/kvhost/kvhost/host/device"
)

// Workspaces is the process-wide get-or-create registry of kernel scratch
// buffers (spec §4: FlashInfer's module-global workspace, the shared input
// buffer pool). Every caller asking for the same name shares one buffer, so
// the ledger counts it once, as workspace, however many callers there are. A
// buffer only grows: asking for more than it holds reallocates it, which is
// why graphs are captured after workspaces reach their final size.
type Workspaces struct {
	a  *Allocator
	mu sync.Mutex
	ws map[string]workspace
}

type workspace struct {
	ptr  device.Ptr
	size int64
}

// NewWorkspaces returns a registry allocating from a.
func NewWorkspaces(a *Allocator) *Workspaces {
	return &Workspaces{a: a, ws: map[string]workspace{}}
}

// Get returns the workspace called name with at least size bytes.
func (w *Workspaces) Get(name string, size int64) (device.Ptr, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur, ok := w.ws[name]
	if ok && cur.size >= size {
		return cur.ptr, nil
	}
	p, err := w.a.Alloc(size, Workspace)
	if err != nil {
		return 0, fmt.Errorf("alloc: workspace %q of %d bytes: %w", name, size, err)
	}
	if ok {
		_ = w.a.Free(cur.ptr)
	}
	w.ws[name] = workspace{p, size}
	return p, nil
}

// WorkspaceInfo is one registry entry.
type WorkspaceInfo struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// List returns every workspace, by name.
func (w *Workspaces) List() []WorkspaceInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]WorkspaceInfo, 0, len(w.ws))
	for n, x := range w.ws {
		out = append(out, WorkspaceInfo{n, x.size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Total is the bytes all workspaces hold.
func (w *Workspaces) Total() int64 {
	var n int64
	for _, x := range w.List() {
		n += x.Bytes
	}
	return n
}

// Close frees every workspace.
func (w *Workspaces) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for n, x := range w.ws {
		_ = w.a.Free(x.ptr)
		delete(w.ws, n)
	}
}
