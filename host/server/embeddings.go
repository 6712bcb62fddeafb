package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"

	"github.com/kvhost/kvhost/host/engine"
)

// Pooling modes of /v1/embeddings (Options.EmbeddingPooling), as llama.cpp's
// server pools a decoder model's final hidden states.
const (
	PoolingMean = "mean" // the mean over the input's tokens
	PoolingLast = "last" // the last token's
)

// embeddingsRequest is POST /v1/embeddings (OpenAI's shape).
type embeddingsRequest struct {
	Input          promptField `json:"input"`
	Model          string      `json:"model"`
	EncodingFormat string      `json:"encoding_format"`
	Dimensions     *int        `json:"dimensions"`
	User           string      `json:"user"`
}

type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingsResponse struct {
	Object string          `json:"object"`
	Data   []embeddingData `json:"data"`
	Model  string          `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// handleEmbeddings serves POST /v1/embeddings: each input (a string, strings,
// token ids, or arrays of them) is tokenized with BOS, prefilled by the
// engine (batched with generation), and its final hidden states pooled
// (Options.EmbeddingPooling) and L2-normalized, as llama.cpp's server does
// for decoder models. encoding_format "base64" sends the float32 values
// little-endian, base64-encoded, as OpenAI does; dimensions must be the
// model's hidden size if given (kvhost does not truncate). A backend without
// the Embedder capability gets a 400 naming the model.
func (s *server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	emb, ok := s.b.(Embedder)
	if !ok {
		s.writeError(w, r, badRequest("model", "the model %q is not served for embeddings", s.b.ModelName()))
		return
	}
	var req embeddingsRequest
	if err := s.decodeExtra(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if !req.Input.Set {
		s.writeError(w, r, badRequest("input", "input is required: a string, an array of strings, or token ids"))
		return
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		s.writeError(w, r, badRequest("encoding_format", "%q is not supported; use \"float\" or \"base64\"", req.EncodingFormat))
		return
	}
	if req.Dimensions != nil && *req.Dimensions != emb.EmbeddingSize() {
		s.writeError(w, r, badRequest("dimensions", "%d is not supported: this model's embeddings have %d dimensions (omit the field)", *req.Dimensions, emb.EmbeddingSize()))
		return
	}
	inputs := req.Input.Tokens
	for _, text := range req.Input.Texts {
		ids, err := s.b.Tokenizer().Encode(text, true)
		if err != nil {
			s.writeError(w, r, fmt.Errorf("server: tokenize input: %w", err))
			return
		}
		if len(ids) == 0 {
			s.writeError(w, r, badRequest("input", "an input tokenizes to no tokens"))
			return
		}
		inputs = append(inputs, ids)
	}
	if len(inputs) > s.opts.MaxPrompts {
		s.writeError(w, r, badRequest("input", "%d inputs given, at most %d are allowed in one request", len(inputs), s.opts.MaxPrompts))
		return
	}
	resp := embeddingsResponse{Object: "list", Model: s.b.ModelName(), Data: make([]embeddingData, len(inputs))}
	// Submit every input before waiting, so they prefill together.
	type pending struct {
		res <-chan embedResult
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	waits := make([]pending, len(inputs))
	for i, ids := range inputs {
		ch := make(chan embedResult, 1)
		go func() {
			h, err := emb.Embed(ctx, ids)
			ch <- embedResult{h, err}
		}()
		waits[i] = pending{ch}
		resp.Usage.PromptTokens += len(ids)
	}
	if po, ok := s.opts.Observer.(PromptObserver); ok {
		if ri := infoOf(r.Context()); ri != nil {
			po.TokensIn(ri.route, resp.Usage.PromptTokens)
		}
	}
	for i, p := range waits {
		res := <-p.res
		if res.err != nil {
			s.writeError(w, r, res.err)
			return
		}
		vec, err := pool(res.hidden, len(inputs[i]), emb.EmbeddingSize(), s.opts.EmbeddingPooling)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		d := embeddingData{Object: "embedding", Index: i, Embedding: vec}
		if req.EncodingFormat == "base64" {
			d.Embedding = encodeFloats(vec)
		}
		resp.Data[i] = d
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	writeJSON(w, http.StatusOK, resp)
}

type embedResult struct {
	hidden []float32
	err    error
}

// Embedder is the optional Backend capability behind /v1/embeddings.
type Embedder interface {
	// Embed returns the final hidden state (after the model's last norm) of
	// every token of prompt: len(prompt) × EmbeddingSize floats.
	Embed(ctx context.Context, prompt []int32) ([]float32, error)
	// EmbeddingSize is the model's hidden size.
	EmbeddingSize() int
}

// pool reduces rows × dim hidden states to one L2-normalized vector, summing
// in float64. A zero vector (all hidden states zero) stays zero.
func pool(hidden []float32, rows, dim int, mode string) ([]float32, error) {
	if rows <= 0 || len(hidden) != rows*dim {
		return nil, fmt.Errorf("server: embedding has %d floats, want %d tokens × %d", len(hidden), rows, dim)
	}
	acc := make([]float64, dim)
	switch mode {
	case PoolingLast:
		for j, v := range hidden[(rows-1)*dim:] {
			acc[j] = float64(v)
		}
	default:
		for i := 0; i < rows; i++ {
			for j, v := range hidden[i*dim : (i+1)*dim] {
				acc[j] += float64(v)
			}
		}
		for j := range acc {
			acc[j] /= float64(rows)
		}
	}
	var norm float64
	for _, v := range acc {
		norm += v * v
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dim)
	for j, v := range acc {
		if norm > 0 {
			v /= norm
		}
		out[j] = float32(v)
	}
	return out, nil
}

// encodeFloats is OpenAI's base64 encoding: little-endian float32s.
func encodeFloats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// EmbedStream collects an engine Embed stream's result: the Backend
// adapters in host/cmd use it to implement Embedder over engine.Submit.
func EmbedStream(st *engine.Stream) ([]float32, error) {
	var hidden []float32
	var err error
	for ev := range st.Events {
		switch {
		case ev.Err != nil:
			err = ev.Err
		case ev.Done:
			hidden = ev.Hidden
		}
	}
	if err == nil && hidden == nil {
		err = errStreamEnded
	}
	return hidden, err
}
