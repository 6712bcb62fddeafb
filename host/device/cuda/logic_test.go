package cuda

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCublasCandidatesOrder(t *testing.T) {
	trees := map[string][]string{
		"/usr/lib/python3*/dist-packages":               {"/usr/lib/python3.11/dist-packages"},
		"/home/u/.local/lib/python3*/site-packages":     {"/home/u/.local/lib/python3.12/site-packages"},
		"/venv/lib/python3*/site-packages":              {"/venv/lib/python3.12/site-packages"},
		"/usr/local/cuda*/lib64":                        {"/usr/local/cuda-12.4/lib64", "/usr/local/cuda/lib64"},
		"/usr/local/lib/python3*/site-packages":         nil,
		"/usr/lib/python3*/site-packages":               nil,
		"/usr/local/lib/python3*/dist-packages":         nil,
		"/opt/conda-not-set/lib/python3*/site-packages": nil,
	}
	env := SearchEnv{Override: "/opt/blas", Home: "/home/u", VirtualEnv: "/venv",
		Glob: func(p string) []string { return trees[p] }}
	got := CublasCandidates(env)
	var blas []string
	for _, c := range got {
		blas = append(blas, c.Blas)
		if !strings.HasSuffix(c.Lt, strings.Replace(c.Blas[strings.LastIndex(c.Blas, "/")+1:], "libcublas", "libcublasLt", 1)) {
			t.Errorf("candidate %+v: Lt and cuBLAS differ in soname", c)
		}
	}
	want := []string{
		"/opt/blas/libcublas.so.13", "/opt/blas/libcublas.so.12", "/opt/blas/libcublas.so.11",
		"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
		"/usr/lib/python3.11/dist-packages/nvidia/cu13/lib/libcublas.so.13",
		"/home/u/.local/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"/usr/lib/python3.11/dist-packages/nvidia/cublas/lib/libcublas.so.12",
		"/home/u/.local/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"/usr/lib/python3.11/dist-packages/nvidia/cublas/lib/libcublas.so.11",
		"/home/u/.local/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.11",
		"/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.11",
		"/usr/local/cuda-12.4/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13",
		"/usr/local/cuda-12.4/lib64/libcublas.so.12", "/usr/local/cuda/lib64/libcublas.so.12",
		"/usr/local/cuda-12.4/lib64/libcublas.so.11", "/usr/local/cuda/lib64/libcublas.so.11",
	}
	if !reflect.DeepEqual(blas, want) {
		t.Fatalf("candidates:\n%s\nwant:\n%s", strings.Join(blas, "\n"), strings.Join(want, "\n"))
	}
}

func TestCublasCandidatesBare(t *testing.T) {
	got := CublasCandidates(SearchEnv{})
	if len(got) != 3 || got[0].Blas != "libcublas.so.13" || got[0].Lt != "libcublasLt.so.13" || got[2].Major != 11 {
		t.Fatalf("bare environment: %+v", got)
	}
}

func TestDecodeBuckets(t *testing.T) {
	for _, tc := range []struct {
		max  int
		want []int
	}{
		{0, nil},
		{1, []int{1}},
		{3, []int{1, 2, 3}},
		{8, []int{1, 2, 4, 8}},
		{12, []int{1, 2, 4, 8, 12}},
		{32, []int{1, 2, 4, 8, 16, 24, 32}},
		{300, nil}, // checked structurally below
	} {
		got := DecodeBuckets(tc.max)
		if tc.want != nil || tc.max == 0 {
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DecodeBuckets(%d) = %v, want %v", tc.max, got, tc.want)
			}
			continue
		}
		if got[len(got)-1] != tc.max || !contains(got, 256) || !contains(got, 272) || !contains(got, 288) || contains(got, 264) {
			t.Errorf("DecodeBuckets(%d) = %v", tc.max, got)
		}
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestPadTable(t *testing.T) {
	b := DecodeBuckets(64)
	tab, err := PadTable(b)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 64; n++ {
		got, ok := Pad(tab, n)
		// Independent reference: the smallest bucket >= n by linear scan.
		want := -1
		for _, x := range b {
			if x >= n {
				want = x
				break
			}
		}
		if !ok || got != want {
			t.Errorf("Pad(%d) = %d, %v; want %d", n, got, ok, want)
		}
	}
	for _, n := range []int{0, -1, 65} {
		if _, ok := Pad(tab, n); ok {
			t.Errorf("Pad(%d) should not fit", n)
		}
	}
	for _, bad := range [][]int{nil, {2, 1}, {0, 4}} {
		if _, err := PadTable(bad); err == nil {
			t.Errorf("PadTable(%v) accepted", bad)
		}
	}
}

func TestGeometry(t *testing.T) {
	if d := elementwise(1); d.Grid[0] != 1 || d.Block[0] != elemThreads {
		t.Errorf("elementwise(1) = %+v", d)
	}
	if d := elementwise(1 << 30); d.Grid[0] != elemMaxBlocks {
		t.Errorf("elementwise(2^30) = %+v, want grid capped", d)
	}
	if d := elementwise(257); d.Grid[0] != 2 {
		t.Errorf("elementwise(257) = %+v", d)
	}
	for _, tc := range []struct{ width, threads int }{{1, 32}, {33, 64}, {100, 128}, {256, 256}, {5000, 256}} {
		if d := perRow(3, tc.width); d.Block[0] != tc.threads || d.Grid[0] != 3 || d.Block[0]%32 != 0 {
			t.Errorf("perRow(3, %d) = %+v, want %d threads", tc.width, d, tc.threads)
		}
	}
	d, err := matvecDims(9, 200)
	if err != nil || d.Grid[0] != 25 || d.Grid[1] != 2 || d.Block[0] != 256 {
		t.Errorf("matvecDims(9, 200) = %+v, %v", d, err)
	}
	// Every output feature gets a warp: blocks*warps ≥ n, and no more than one spare block.
	for _, n := range []int{1, 7, 8, 9, 4096, 128256} {
		d, _ := matvecDims(1, n)
		w := d.Grid[0] * d.Block[0] / 32
		if w < n || w-n >= d.Block[0]/32 {
			t.Errorf("matvecDims(1, %d): %d warps", n, w)
		}
	}
	if _, err := matvecDims(maxGridY*matvecRows+1, 10); err == nil {
		t.Error("matvec past the grid accepted")
	}
	a, err := attentionDims(7, 32, 128, 128)
	if err != nil || a.Grid != [3]int{7, 32, 1} || a.Shared != 4*(128+attnChunk) {
		t.Errorf("attentionDims = %+v, %v", a, err)
	}
	if a, err := attentionDims(1, 128, 576, 512); err != nil || a.Shared != 4*(576+attnChunk) {
		t.Errorf("MLA latent attentionDims = %+v, %v", a, err)
	}
	for _, hd := range [][2]int{{0, 64}, {577, 64}, {64, 0}, {576, 513}} {
		if _, err := attentionDims(1, 1, hd[0], hd[1]); err == nil {
			t.Errorf("head dims %v accepted", hd)
		}
	}
}

func TestMetaLen(t *testing.T) {
	for _, tc := range []struct{ pages, want int }{{0, 64}, {1, 64}, {63, 64}, {64, 128}, {127, 128}, {128, 256}, {5000, 8192}} {
		if got := metaLen(tc.pages); got != tc.want || got < tc.pages+1 {
			t.Errorf("metaLen(%d) = %d, want %d", tc.pages, got, tc.want)
		}
	}
}

func TestRing(t *testing.T) {
	r := ring{size: 1024}
	steps := []struct {
		n       int64
		mayWrap bool
		off     int64
		wrap    bool
		full    bool
	}{
		{4, true, 0, false, false},
		{300, true, 256, false, false},
		{256, true, 768, false, false},
		{1, true, 0, true, false}, // 1024 used: wraps
		{1, false, 256, false, false},
		{1024, false, 0, false, true}, // does not fit without wrapping
		{1025, true, 0, false, true},  // never fits
		{0, true, 512, false, false},
	}
	for i, s := range steps {
		off, wrap, err := r.take(s.n, s.mayWrap)
		var full *ErrRingFull
		if s.full != errors.As(err, &full) {
			t.Fatalf("step %d: err %v, want full=%v", i, err, s.full)
		}
		if s.full {
			continue
		}
		if off != s.off || wrap != s.wrap || off%ringAlign != 0 {
			t.Fatalf("step %d: take(%d) = %d, %v; want %d, %v", i, s.n, off, wrap, s.off, s.wrap)
		}
	}
	if _, _, err := r.take(-1, true); err == nil {
		t.Error("negative span accepted")
	}
	r.reset()
	if off, _, _ := r.take(8, false); off != 0 {
		t.Errorf("after reset: %d", off)
	}
}

// TestRingFits checks fits against take without wrapping: a recording grows
// the ring exactly when take would refuse the span.
func TestRingFits(t *testing.T) {
	for _, tc := range []struct {
		off, n int64
		want   bool
	}{
		{0, 0, true}, {0, 1024, true}, {0, 1025, false}, {0, -1, false},
		{768, 1, true}, {768, 256, true}, {768, 257, false}, {1024, 1, false}, {1024, 0, true},
	} {
		r := ring{size: 1024, off: tc.off}
		if got := r.fits(tc.n); got != tc.want {
			t.Errorf("off %d: fits(%d) = %v, want %v", tc.off, tc.n, got, tc.want)
		}
		if tc.n < 0 {
			continue
		}
		if _, _, err := r.take(tc.n, false); (err == nil) != tc.want {
			t.Errorf("off %d: take(%d) err %v disagrees with fits %v", tc.off, tc.n, err, tc.want)
		}
	}
}
