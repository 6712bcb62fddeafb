package tokenizer

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"github.com/kvhost/kvhost/internal/testmodels"
	"io"
	"math"
	"os"
	"sync"
	"testing"
)

// A test-only GGUF metadata reader: just enough to pull the tokenizer arrays
// out of ../shared/models/stories260K.gguf without importing the gguf package.

type ggufReader struct {
	r   *bufio.Reader
	err error
}

func (g *ggufReader) read(v any) {
	if g.err == nil {
		g.err = binary.Read(g.r, binary.LittleEndian, v)
	}
}

func (g *ggufReader) u32() uint32 { var v uint32; g.read(&v); return v }
func (g *ggufReader) u64() uint64 { var v uint64; g.read(&v); return v }

func (g *ggufReader) str() string {
	n := g.u64()
	if g.err != nil || n > 1<<20 {
		if g.err == nil {
			g.err = fmt.Errorf("string length %d", n)
		}
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(g.r, b); err != nil && g.err == nil {
		g.err = err
	}
	return string(b)
}

var ggufScalarSize = map[uint32]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

// value reads one value of type t; scalars come back as uint64 bits,
// arrays as []any.
func (g *ggufReader) value(t uint32) any {
	switch t {
	case 8:
		return g.str()
	case 9:
		et, n := g.u32(), g.u64()
		if n > 1<<24 {
			g.err = fmt.Errorf("array length %d", n)
			return nil
		}
		out := make([]any, 0, n)
		for i := uint64(0); i < n && g.err == nil; i++ {
			out = append(out, g.value(et))
		}
		return out
	}
	size, ok := ggufScalarSize[t]
	if !ok {
		g.err = fmt.Errorf("unknown type %d", t)
		return nil
	}
	var buf [8]byte
	g.read(buf[:size])
	return binary.LittleEndian.Uint64(buf[:])
}

func readGGUFMetadata(path string) (map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g := &ggufReader{r: bufio.NewReader(f)}
	var magic [4]byte
	g.read(&magic)
	if g.err == nil && string(magic[:]) != "GGUF" {
		return nil, fmt.Errorf("bad magic %q", magic)
	}
	g.u32() // version
	g.u64() // tensor count
	nkv := g.u64()
	md := map[string]any{}
	for i := uint64(0); i < nkv && g.err == nil; i++ {
		k := g.str()
		md[k] = g.value(g.u32())
	}
	return md, g.err
}

var (
	storiesOnce sync.Once
	storiesCfg  SPMConfig
	storiesErr  error
)

// storiesConfig reads the stories260K vocabulary as an SPMConfig.
func storiesConfig(t testing.TB) SPMConfig {
	path := testmodels.MustStories260K(t)
	storiesOnce.Do(func() {
		md, err := readGGUFMetadata(path)
		if err != nil {
			storiesErr = err
			return
		}
		if md["tokenizer.ggml.model"] != "llama" {
			storiesErr = fmt.Errorf("tokenizer.ggml.model = %v", md["tokenizer.ggml.model"])
			return
		}
		toks, _ := md["tokenizer.ggml.tokens"].([]any)
		scores, _ := md["tokenizer.ggml.scores"].([]any)
		types, _ := md["tokenizer.ggml.token_type"].([]any)
		c := SPMConfig{Tokens: make([]string, len(toks)), Scores: make([]float32, len(scores)), Types: make([]int32, len(types))}
		for i, v := range toks {
			c.Tokens[i] = v.(string)
		}
		for i, v := range scores {
			c.Scores[i] = math.Float32frombits(uint32(v.(uint64)))
		}
		for i, v := range types {
			c.Types[i] = int32(uint32(v.(uint64)))
		}
		id := func(k string) int32 { return int32(uint32(md[k].(uint64))) }
		c.BOS, c.EOS, c.UNK = id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id"), id("tokenizer.ggml.unknown_token_id")
		c.AddBOS = md["tokenizer.ggml.add_bos_token"].(uint64) != 0
		c.AddEOS = md["tokenizer.ggml.add_eos_token"].(uint64) != 0
		storiesCfg = c
	})
	if storiesErr != nil {
		t.Fatalf("read %s: %v", path, storiesErr)
	}
	return storiesCfg
}

func storiesSPM(t testing.TB) *SentencePiece {
	s, err := NewSentencePiece(storiesConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
