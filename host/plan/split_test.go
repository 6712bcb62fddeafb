package plan

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/model/gguf"
	"github.com/kvhost/kvhost/internal/testmodels"
)

// TestSplitGGUFPlansAsMerged: plan reads a gguf-split model's header from
// any shard — the same name, configuration, weight tensors and GPU weight
// bytes as the merged file — and refuses one with a shard missing, naming
// it.
func TestSplitGGUFPlansAsMerged(t *testing.T) {
	merged := testmodels.MustStories260K(t)
	shards, err := gguf.SplitFile(merged, filepath.Join(t.TempDir(), "stories260K"), gguf.SplitLimits{MaxTensors: 6})
	if err != nil {
		t.Fatal(err)
	}
	name, c, ts, err := LoadModel(merged)
	if err != nil {
		t.Fatal(err)
	}
	gname, _, gbytes, _, err := LoadGPUModel(merged)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{shards[0], shards[len(shards)-1]} {
		sname, sc, sts, err := LoadModel(p)
		if err != nil {
			t.Fatal(err)
		}
		if sname != name || !reflect.DeepEqual(sc, c) || !reflect.DeepEqual(sts, ts) {
			t.Fatalf("%s: plan reads %q %d tensors, the merged file %q %d tensors", filepath.Base(p), sname, len(sts), name, len(ts))
		}
		n, _, b, _, err := LoadGPUModel(p)
		if err != nil || n != gname || b != gbytes || b == 0 {
			t.Fatalf("%s: GPU model %q %d bytes (%v), merged %q %d", filepath.Base(p), n, b, err, gname, gbytes)
		}
	}
	os.Remove(shards[1])
	if _, _, _, err := LoadModel(shards[0]); err == nil || !strings.Contains(err.Error(), filepath.Base(shards[1])+"): missing") {
		t.Fatalf("plan with a shard missing: %v", err)
	}
}
