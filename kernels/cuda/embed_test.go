package cuda

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestManifestMatchesSources is the toolchain-free half of the drift check:
// every source's SHA-256 must be the one recorded when the PTX and fatbins
// were generated (scripts/build-kernels.sh writes kernels.sum).
func TestManifestMatchesSources(t *testing.T) {
	man, err := Manifest()
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(man))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			if !strings.Contains(line, "release 11.8") || !strings.Contains(line, "compute_80") || !strings.Contains(line, "compute_90") {
				t.Errorf("manifest header %q: want nvcc release 11.8 for compute_80 and compute_90", line)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("manifest line %q", line)
		}
		recorded[f[1]] = f[0]
	}
	// Read the sources from disk, not the embed: a source edited after the
	// last build must fail here.
	disk, err := filepath.Glob("*.cu*")
	if err != nil {
		t.Fatal(err)
	}
	if len(disk) != len(recorded) {
		t.Errorf("%d sources on disk, %d in kernels.sum (run scripts/build-kernels.sh)", len(disk), len(recorded))
	}
	for _, name := range disk {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(src)
		if got := hex.EncodeToString(sum[:]); recorded[name] != got {
			t.Errorf("%s: sha256 %s, kernels.sum has %q: the PTX is stale (run scripts/build-kernels.sh)", name, got, recorded[name])
		}
	}
}

var entryRE = regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)

func TestEveryKernelIsInItsModule(t *testing.T) {
	var seen int
	for _, mod := range ModuleNames() {
		if _, err := Source(mod + ".cu"); err != nil {
			t.Errorf("module %s has no source: %v", mod, err)
		}
		for _, arch := range Arches {
			ptx, err := PTX(mod, arch)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(ptx, []byte("\n.target "+arch+"\n")) || !bytes.Contains(ptx, []byte("\n.version 7.8\n")) {
				t.Errorf("%s %s: PTX lacks .version 7.8 / .target %s", mod, arch, arch)
			}
			entries := map[string]bool{}
			for _, m := range entryRE.FindAllSubmatch(ptx, -1) {
				entries[string(m[1])] = true
			}
			for _, fn := range Modules[mod] {
				if !entries[fn] {
					t.Errorf("%s %s: no entry %s (entries %v)", mod, arch, fn, entries)
				}
			}
			if len(entries) != len(Modules[mod]) {
				t.Errorf("%s %s: %d entries in the PTX, Modules lists %d", mod, arch, len(entries), len(Modules[mod]))
			}
			seen += len(entries)
		}
		fat, err := Fatbin(mod)
		if err != nil {
			t.Fatal(err)
		}
		// Fatbin container magic 0xBA55ED50, little-endian.
		if len(fat) < 16 || !bytes.Equal(fat[:4], []byte{0x50, 0xed, 0x55, 0xba}) {
			t.Errorf("%s.fatbin: not a fatbin", mod)
		}
	}
	if seen == 0 {
		t.Fatal("no kernels found")
	}
	if got := len(Sources()); got != len(Modules)+2 {
		t.Errorf("%d sources embedded, want %d modules, common.cuh and quant.cuh", got, len(Modules))
	}
}

func TestMissingArtifact(t *testing.T) {
	if _, err := PTX("attention", "sm_75"); err == nil {
		t.Error("PTX for sm_75 found")
	}
	if _, err := Fatbin("nope"); err == nil {
		t.Error("fatbin for an unknown module found")
	}
}
