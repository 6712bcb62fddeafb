package constraint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
)

// ABIVersion is the constraint ABI version; kvhost_abi_version returns it.
const ABIVersion = 1

// Kind is the descriptor kind of a constraint plugin.
const Kind = "constraint"

// Exports of a constraint module (besides kvhost_abi_version,
// kvhost_describe, kvhost_malloc, kvhost_free and kvhost_last_error).
const (
	// ExportInit: (vocab_ptr i32, vocab_len i32, max_batch i32) -> i32,
	// the I/O header's address (0: failure). Called once per instance;
	// the vocabulary block (KVV1, sdk/constraint/grammar.MarshalVocab)
	// becomes the guest's, the host never frees it.
	ExportInit = "kvhost_constraint_init"
	// ExportOpen: (spec_ptr i32, spec_len i32) -> i32, a sequence handle
	// (> 0) or a negative status. The host frees the spec block after.
	ExportOpen = "kvhost_constraint_open"
	// ExportFork: (handle i32) -> i32, a new handle at the same position.
	ExportFork = "kvhost_constraint_fork"
	// ExportClose: (handle i32) -> i32 status.
	ExportClose = "kvhost_constraint_close"
	// ExportStep: (rows i32) -> i32 status. Advances each row's sequence
	// by its token and writes its mask (see the I/O header).
	ExportStep = "kvhost_constraint_step"
)

// Status codes of open, fork, close and step (and of a row's status
// word): 0 ok, negative an error whose text kvhost_last_error returns.
const (
	StatusOK = 0
	// StatusBadSpec: open could not use the spec.
	StatusBadSpec = -1
	// StatusBadHandle: a handle that is not open.
	StatusBadHandle = -2
	// StatusRefused: the row's token is not allowed where the sequence is.
	StatusRefused = -3
	// StatusFailed: any other error (too complex, out of memory, ...).
	StatusFailed = -4
)

// IOMagic is the first u32 of the I/O header ("KVC1").
const IOMagic = 0x3143564B

// Field indices of the I/O header, HeaderWords little-endian u32: three
// sizes, then six addresses of arrays of max_batch elements.
const (
	HdrMagic    = iota
	HdrMaxBatch // rows per step at most
	HdrVocab    // tokens in the vocabulary (mask width in bits)
	HdrWords    // u32 words per mask: (vocab+31)/32
	HdrHandle   // i32[max_batch], host-written: the row's sequence
	HdrToken    // i32[max_batch], host-written: the token chosen last step, -1 for none
	HdrBudget   // i32[max_batch], host-written: tokens left including the next; 0: no limit
	HdrStatus   // i32[max_batch], guest-written: the row's status
	HdrFlags    // u32[max_batch], guest-written: FlagAccept | FlagComplete
	HdrMask     // u32[max_batch], guest-written: address of the row's mask
	HeaderWords // 10
)

// Row flags.
const (
	// FlagAccept: the output so far is complete; end-of-generation
	// tokens may follow.
	FlagAccept = 1 << 0
	// FlagComplete: nothing but end-of-generation may follow.
	FlagComplete = 1 << 1
)

// Limits.
const (
	MaxDescriptorSize = 64 << 10
	MaxSpecBytes      = 16 << 20
	MaxBatch          = 4096
)

// SpecFormatGrammar is the format of a spec that carries a compiled
// grammar (KVG1, sdk/constraint/grammar).
const SpecFormatGrammar = "kvg1"

// Descriptor is what kvhost_describe returns.
type Descriptor struct {
	ABI     int    `json:"abi"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Formats are the spec formats Open accepts: "kvg1" (a compiled
	// grammar in Spec.Grammar) and/or spec types the plugin compiles
	// itself from Spec.Source ("json_schema", "regex", ...).
	Formats []string `json:"formats"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Validate names the first bad field.
func (d *Descriptor) Validate() error {
	switch {
	case d.ABI != ABIVersion:
		return fmt.Errorf("constraint: descriptor abi %d, want %d", d.ABI, ABIVersion)
	case d.Kind != Kind:
		return fmt.Errorf("constraint: descriptor kind %q, want %q", d.Kind, Kind)
	case !nameRE.MatchString(d.Name):
		return fmt.Errorf("constraint: descriptor name %q must match %s", d.Name, nameRE)
	case d.Version == "" || len(d.Version) > 128:
		return fmt.Errorf("constraint: descriptor version %q must be 1..128 bytes", d.Version)
	case len(d.Formats) == 0 || len(d.Formats) > 32:
		return fmt.Errorf("constraint: descriptor lists %d formats, want 1..32", len(d.Formats))
	}
	for _, f := range d.Formats {
		if f == "" || len(f) > 64 {
			return fmt.Errorf("constraint: descriptor format %q must be 1..64 bytes", f)
		}
	}
	return nil
}

// Accepts reports whether the plugin takes specs of format f.
func (d *Descriptor) Accepts(f string) bool { return slices.Contains(d.Formats, f) }

// ParseDescriptor decodes and validates a descriptor; unknown fields are
// errors.
func ParseDescriptor(b []byte) (*Descriptor, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d Descriptor
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("constraint: descriptor: %w", err)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Spec is the document kvhost_constraint_open receives: what the request
// asked for (Type and Source, as the API spelled it) and, for plugins
// that take "kvg1", the host's compiled grammar.
type Spec struct {
	// Type is json_object, json_schema, regex, grammar, choice or
	// tool_calls.
	Type string `json:"type"`
	// Source is the request's schema, pattern, grammar or choices as JSON.
	Source json.RawMessage `json:"source,omitempty"`
	// Grammar is the compiled grammar (KVG1), base64 in JSON.
	Grammar []byte `json:"grammar,omitempty"`
}

// Marshal encodes s.
func (s *Spec) Marshal() ([]byte, error) { return json.Marshal(s) }

// ParseSpec decodes a spec.
func ParseSpec(b []byte) (*Spec, error) {
	if len(b) > MaxSpecBytes {
		return nil, fmt.Errorf("constraint: spec of %d bytes, at most %d", len(b), MaxSpecBytes)
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("constraint: spec: %w", err)
	}
	if s.Type == "" {
		return nil, fmt.Errorf("constraint: spec has no type")
	}
	return &s, nil
}
