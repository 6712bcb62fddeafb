package layout

import (
	"fmt"
	"slices"

	"github.com/kvhost/kvhost/sdk"
)

// OptionalWindowArchitectures are claimed by both the mha and the swa
// plugins: their configs may or may not limit every layer's attention to
// a sliding window (Mistral-7B-v0.1: sliding_window 4096; v0.2 and later:
// null). SlidingServed decides which plugin serves a given config, and the
// other declines it (sdk.ErrDeclined), so exactly one built-in takes each
// model and the host's registry needs no rule of its own.
var OptionalWindowArchitectures = []string{"MistralForCausalLM"}

// SlidingServed is the sliding window a model of an optional-window
// architecture is served with: its config's sliding_window when that is
// set and smaller than the context the host serves (HostFacts.
// ContextLength), else 0 (full attention: a window that covers the whole
// context limits nothing, and a full pool serves it). The host model reads
// the same rule (host/model swaFromHF), so the layers' windows and the
// pools agree.
func SlidingServed(m *Model, h sdk.HostFacts) (int64, error) {
	w, ok, err := m.Int("sliding_window")
	if err != nil || !ok || w == 0 {
		return 0, err
	}
	if w < 0 {
		return 0, fmt.Errorf("layout: model config sliding_window = %d: want null, 0 or a positive window", w)
	}
	if ctx := h.WithDefaults().ContextLength; w >= ctx {
		return 0, nil
	}
	return w, nil
}

// declineOptionalWindow is the mha (sliding false) or swa (sliding true)
// plugin's answer for a model of an optional-window architecture that the
// other one serves, nil when the plugin serves it or claims the
// architecture alone.
func declineOptionalWindow(plugin string, sliding bool, m *Model, h sdk.HostFacts) error {
	if !slices.Contains(OptionalWindowArchitectures, m.Architecture()) {
		return nil
	}
	w, err := SlidingServed(m, h)
	switch {
	case err != nil:
		return err
	case sliding && w == 0:
		return fmt.Errorf("layout: %s configurator: %s with no sliding window smaller than the %d-token context is full attention; the mha configurator serves it: %w",
			plugin, m.Architecture(), h.WithDefaults().ContextLength, sdk.ErrDeclined)
	case !sliding && w > 0:
		return fmt.Errorf("layout: %s configurator: %s slides over sliding_window %d of the %d-token context; the swa configurator serves it: %w",
			plugin, m.Architecture(), w, h.WithDefaults().ContextLength, sdk.ErrDeclined)
	}
	return nil
}
