package cuda

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMambaGeometryMatchesSource checks the mirrored constants against
// kernels/cuda/mamba.cu's defines.
func TestMambaGeometryMatchesSource(t *testing.T) {
	src, err := os.ReadFile("../../../kernels/cuda/mamba.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"MAMBA_MAXK": mambaMaxK, "SCAN_MAXS": scanMaxS} {
		m := regexp.MustCompile(`#define ` + name + ` (\d+)`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("mamba.cu defines no %s", name)
		}
		if got, _ := strconv.Atoi(string(m[1])); got != want {
			t.Errorf("%s = %d in mamba.cu, %d here", name, got, want)
		}
	}
}

func TestMambaScanDims(t *testing.T) {
	for _, tc := range []struct {
		headDim, state, r, threads int
	}{{64, 128, 4, 256}, {64, 256, 8, 512}, {128, 128, 4, 512}, {5, 7, 1, 5}, {64, 16, 1, 64}} {
		d, r, q, err := mambaScanDims(32, tc.headDim, tc.state, 3)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if r != tc.r || d.Block[0] != tc.threads || d.Grid != [3]int{32, 3, 1} {
			t.Errorf("%+v: r %d, dims %+v", tc, r, d)
		}
		if q < 1 || q > scanMaxChunk || d.Shared > scanSharedMax || d.Shared != 4*(q*(2*tc.state+tc.headDim+1)+r*tc.headDim) {
			t.Errorf("%+v: q %d, shared %d", tc, q, d.Shared)
		}
		if r*scanMaxS < tc.state {
			t.Errorf("%+v: %d rows per thread × %d cannot hold state %d", tc, scanMaxS, r, tc.state)
		}
	}
	for _, bad := range []struct{ headDim, state int }{{256, 256}, {1024, 64}, {16, 6000}} {
		if _, _, _, err := mambaScanDims(1, bad.headDim, bad.state, 1); err == nil || !strings.Contains(err.Error(), "mamba scan") {
			t.Errorf("head dim %d state %d: err %v, want a mamba scan error", bad.headDim, bad.state, err)
		}
	}
}

func TestMambaOtherDims(t *testing.T) {
	if d, err := mambaConvDims(10240, 7); err != nil || d.Grid != [3]int{80, 7, 1} || d.Block[0] != convThreads {
		t.Errorf("conv dims %+v, %v", d, err)
	}
	if _, err := mambaConvDims(10, maxGridY+1); err == nil {
		t.Error("conv over too many sequences accepted")
	}
	if d, err := mambaUpdateDims(128, 64, 128, 9); err != nil || d.Block[0] != 64 || d.Shared != 1024 || d.Grid != [3]int{128, 9, 1} {
		t.Errorf("update dims %+v, %v", d, err)
	}
	if d, err := mambaUpdateDims(4, 5, 3, 1); err != nil || d.Block[0] != 32 {
		t.Errorf("update dims for head dim 5: %+v, %v", d, err)
	}
	if d, err := gatedNormDims(3, 8192, 1024); err != nil || d.Grid != [3]int{8, 3, 1} || d.Block[0] != 256 {
		t.Errorf("norm dims %+v, %v", d, err)
	}
	if _, err := gatedNormDims(3, 100, 7); err == nil {
		t.Error("norm groups that do not divide the row accepted")
	}
}
