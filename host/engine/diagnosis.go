package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model"
)

// Diagnosis explains one out-of-memory failure of a forward: where it
// happened, what the forward held, and which knob would have prevented it.
type Diagnosis struct {
	Time          time.Time `json:"time"`
	Stage         string    `json:"stage"` // prefill, decode, mixed
	Tokens        int       `json:"tokens"`
	Sequences     int       `json:"sequences"`
	LogitRows     int       `json:"logit_rows"`
	InputLogprobs bool      `json:"input_logprobs"`
	EagerDecode   bool      `json:"eager_decode"`
	Requested     int64     `json:"requested_bytes"`
	Free          int64     `json:"free_bytes"`
	Knob          string    `json:"knob"`
	Value         string    `json:"value"`
	Reason        string    `json:"reason"`
	Error         string    `json:"error"`
	// Allocator is the allocator's state at the failure, as the Config's
	// AllocatorState reports it.
	Allocator any `json:"allocator,omitempty"`
}

const maxDiagnoses = 16

// diagnose builds the diagnosis of an out-of-memory forward. The checks run
// from the most specific cause to the most general: full-vocabulary logits
// for input logprobs, then the prefill chunk, then an uncaptured decode
// batch, and only then the static memory fraction.
func (e *Engine) diagnose(batch []model.Seq, owners []*seq, eager bool, err error) Diagnosis {
	d := Diagnosis{Time: time.Now(), Sequences: len(batch), EagerDecode: eager, Error: err.Error()}
	prefill, decode := false, false
	for i, b := range batch {
		d.Tokens += len(b.Tokens)
		d.LogitRows += b.LogitRows
		if len(b.Tokens) > 1 || !owners[i].started {
			prefill = true
		} else {
			decode = true
		}
		if owners[i].req.PromptLogprobs && !owners[i].started {
			d.InputLogprobs = true
		}
	}
	switch {
	case prefill && decode:
		d.Stage = "mixed"
	case prefill:
		d.Stage = "prefill"
	default:
		d.Stage = "decode"
	}
	var oom *device.OutOfMemoryError
	if errors.As(err, &oom) {
		d.Requested, d.Free = oom.Requested, oom.Free
	}
	switch {
	case d.InputLogprobs && d.LogitRows > 1:
		d.Knob, d.Value = "--logprob-chunk-size", fmt.Sprint(max(1, d.LogitRows/4))
		d.Reason = fmt.Sprintf("input logprobs put %d rows of full-vocabulary logits into one forward", d.LogitRows)
	case prefill && d.Tokens > 1:
		d.Knob, d.Value = "--chunked-prefill-size", fmt.Sprint(max(1, d.Tokens/2))
		d.Reason = fmt.Sprintf("a forward of %d new tokens needed more activation memory than the slack holds", d.Tokens)
	case eager:
		d.Knob, d.Value = "--cuda-graph-max-bs", fmt.Sprint(d.Sequences)
		d.Reason = fmt.Sprintf("a decode batch of %d ran eagerly, outside the captured graphs' memory", d.Sequences)
	default:
		d.Knob, d.Value = "--mem-fraction-static", "lower by the shortfall"
		d.Reason = "even a captured decode step did not fit: the KV pool leaves too little slack"
		if d.Requested > 0 {
			d.Value = fmt.Sprintf("a value that leaves at least %d more bytes free", d.Requested-d.Free)
		}
	}
	if e.cfg.AllocatorState != nil {
		d.Allocator = e.cfg.AllocatorState()
	}
	return d
}

func (e *Engine) record(d Diagnosis) {
	e.diagMu.Lock()
	defer e.diagMu.Unlock()
	if len(e.diags) == maxDiagnoses {
		e.diags = e.diags[1:]
	}
	e.diags = append(e.diags, d)
	e.log.Error("engine: out of memory", "stage", d.Stage, "tokens", d.Tokens, "seqs", d.Sequences,
		"input_logprobs", d.InputLogprobs, "eager_decode", d.EagerDecode, "knob", d.Knob, "value", d.Value, "reason", d.Reason)
}

// Diagnoses returns the recent out-of-memory diagnoses, oldest first.
func (e *Engine) Diagnoses() []Diagnosis {
	e.diagMu.Lock()
	defer e.diagMu.Unlock()
	return append([]Diagnosis(nil), e.diags...)
}
