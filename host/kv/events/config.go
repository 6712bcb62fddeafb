package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Config is vLLM's KVEventsConfig, as its --kv-events-config flag takes it
// in JSON (the same keys and defaults), plus kvhost's "encoding".
type Config struct {
	// EnableKVCacheEvents turns the events on; off by default.
	EnableKVCacheEvents bool `json:"enable_kv_cache_events"`
	// Publisher is "zmq" or "null"; empty means "zmq" when events are on.
	Publisher string `json:"publisher,omitempty"`
	// Endpoint is the PUB socket: bound when it holds "*" or "::" or is
	// ipc:// or inproc:// (tcp://*:5557, the default), else connected to a
	// subscriber that binds (tcp://router:5557).
	Endpoint string `json:"endpoint,omitempty"`
	// ReplayEndpoint is vLLM's ROUTER socket, always bound, where a
	// subscriber that missed batches asks for them again from a sequence
	// number (replay.go); BufferSteps is how many of the last batches it
	// keeps (10,000, vLLM's default; it needs ReplayEndpoint).
	ReplayEndpoint string `json:"replay_endpoint,omitempty"`
	BufferSteps    int    `json:"buffer_steps,omitempty"`
	// HWM is the PUB socket's high-water mark: batches beyond it, queued
	// for slow subscribers, are dropped (100,000).
	HWM int `json:"hwm,omitempty"`
	// MaxQueueSize bounds the batches waiting for the sending goroutine
	// (100,000).
	MaxQueueSize int `json:"max_queue_size,omitempty"`
	// Topic is the first frame of every message (""); llm-d's routers
	// expect kv@<pod>@<model>.
	Topic string `json:"topic,omitempty"`
	// Encoding is kvhost's choice of vLLM's two msgpack layouts: "array"
	// (the default) or "map".
	Encoding Encoding `json:"encoding,omitempty"`
}

// vLLM's defaults.
const (
	DefaultEndpoint     = "tcp://*:5557"
	DefaultHWM          = 100_000
	DefaultMaxQueueSize = 100_000
	DefaultBufferSteps  = 10_000
)

// ParseConfig reads --kv-events-config's JSON; an unknown key, a bad value
// or trailing text is an error naming it.
func ParseConfig(s string) (Config, error) {
	var c Config
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("events: --kv-events-config: %w", err)
	}
	if d.More() {
		return Config{}, fmt.Errorf("events: --kv-events-config: text after the JSON object")
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// WithDefaults is a copy of c with vLLM's defaults where c leaves a field
// unset.
func (c Config) WithDefaults() Config {
	if c.Publisher == "" {
		c.Publisher = "null"
		if c.EnableKVCacheEvents {
			c.Publisher = "zmq"
		}
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.HWM == 0 {
		c.HWM = DefaultHWM
	}
	if c.MaxQueueSize == 0 {
		c.MaxQueueSize = DefaultMaxQueueSize
	}
	if c.BufferSteps == 0 && c.ReplayEndpoint != "" {
		c.BufferSteps = DefaultBufferSteps
	}
	if c.Encoding == "" {
		c.Encoding = Array
	}
	return c
}

// Enabled reports whether c publishes anything.
func (c Config) Enabled() bool {
	return c.EnableKVCacheEvents && c.WithDefaults().Publisher == "zmq"
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	if c.BufferSteps != 0 && c.ReplayEndpoint == "" {
		return fmt.Errorf("events: buffer_steps %d sizes the replay buffer, which only replay_endpoint serves: set replay_endpoint too, or leave buffer_steps unset", c.BufferSteps)
	}
	c = c.WithDefaults()
	switch {
	case c.Publisher != "zmq" && c.Publisher != "null":
		return fmt.Errorf("events: publisher %q, want \"zmq\" or \"null\"", c.Publisher)
	case c.Publisher == "zmq" && !c.EnableKVCacheEvents:
		return fmt.Errorf("events: publisher \"zmq\" with enable_kv_cache_events false: set it to true to publish")
	case c.HWM < 1 || c.HWM > 100_000_000:
		return fmt.Errorf("events: hwm %d, want 1..100000000 messages", c.HWM)
	case c.MaxQueueSize < 1 || c.MaxQueueSize > 100_000_000:
		return fmt.Errorf("events: max_queue_size %d, want 1..100000000 batches", c.MaxQueueSize)
	case c.Encoding != Array && c.Encoding != Map:
		return fmt.Errorf("events: encoding %q, want %q or %q", c.Encoding, Array, Map)
	case c.ReplayEndpoint != "" && (c.BufferSteps < 1 || c.BufferSteps > 10_000_000):
		return fmt.Errorf("events: buffer_steps %d, want 1..10000000 batches", c.BufferSteps)
	case c.ReplayEndpoint != "" && c.ReplayEndpoint == c.Endpoint:
		return fmt.Errorf("events: replay_endpoint %q is also the endpoint; the two sockets need their own", c.ReplayEndpoint)
	}
	if err := checkEndpoint("endpoint", c.Endpoint); err != nil {
		return err
	}
	if c.ReplayEndpoint != "" {
		return checkEndpoint("replay_endpoint", c.ReplayEndpoint)
	}
	return nil
}

func checkEndpoint(name, ep string) error {
	for _, scheme := range []string{"tcp://", "ipc://", "inproc://"} {
		if strings.HasPrefix(ep, scheme) && len(ep) > len(scheme) {
			return nil
		}
	}
	return fmt.Errorf("events: %s %q, want tcp://host:port, ipc://path or inproc://name", name, ep)
}

// binds is vLLM's rule: a wildcard or IPv6-any host, ipc:// or inproc://
// is bound; anything else is a remote subscriber to connect to.
func binds(ep string) bool {
	return strings.Contains(ep, "*") || strings.Contains(ep, "::") || strings.HasPrefix(ep, "ipc://") || strings.HasPrefix(ep, "inproc://")
}

// String is the JSON of c, as --kv-events-config takes it.
func (c Config) String() string {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(c)
	return strings.TrimSpace(b.String())
}
