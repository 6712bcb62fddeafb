package alloc

import "testing"

func TestWorkspacesShareAndGrow(t *testing.T) {
	a := New("test", newFake(1<<30))
	w := NewWorkspaces(a)
	p1, err := w.Get("attention", 1000)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := w.Get("attention", 800)
	if p1 != p2 {
		t.Fatal("a second caller got its own buffer")
	}
	if st := a.Stats(); st.ByCategory[Workspace] != 1024 {
		t.Fatalf("workspace counted %d bytes, want one 1024-byte block", st.ByCategory[Workspace])
	}
	p3, _ := w.Get("attention", 4000)
	if p3 == p1 || w.Total() != 4000 {
		t.Fatalf("growth: %#x total %d", p3, w.Total())
	}
	if st := a.Stats(); st.ByCategory[Workspace] != 4096 {
		t.Fatalf("old buffer not freed on growth: %d", st.ByCategory[Workspace])
	}
	w.Close()
	if a.Stats().Allocated != 0 {
		t.Fatal("close leaked")
	}
}
