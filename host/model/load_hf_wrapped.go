package model

import "strings"

// A multimodal wrapper's checkpoint (Gemma3ForConditionalGeneration) keeps
// its language model's tensors under a prefix: language_model.model.* and
// language_model.lm_head.weight as published, model.language_model.* and
// lm_head.weight as transformers ≥ 4.52 saves it (its
// _checkpoint_conversion_mapping). The vision tower (vision_tower.*,
// multi_modal_projector.*) is never read. hf.Normalize reads the config's
// text_config the same way.

// textName is the wrapped checkpoint's name for a language-model tensor
// name (model.*, lm_head.weight): the first spelling the checkpoint holds,
// name itself when it holds none.
func (s hfSource) textName(name string) string {
	var cands []string
	if rest, ok := strings.CutPrefix(name, "model."); ok {
		cands = []string{"language_model.model." + rest, "model.language_model." + rest}
	} else if name == "lm_head.weight" {
		cands = []string{"language_model.lm_head.weight"}
	}
	for _, c := range cands {
		if _, ok := s.set.Info(c); ok {
			return c
		}
	}
	return name
}

// wrapperNote is what serve says at startup about the parts of a wrapped
// checkpoint it does not load.
func wrapperNote(class string) string {
	return "model: " + class + ": serving its language model only; the vision tower (vision_config, vision_tower.*, multi_modal_projector.*) is not loaded, so image inputs are not accepted"
}
