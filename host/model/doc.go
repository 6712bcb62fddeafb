// Package model turns model files into a forward pass on a device.
//
// It reads GGUF files and Hugging Face directories (formats in gguf/,
// safetensors/, hf/; tokenizers in tokenizer/; chat templates in chat/),
// validates the architecture's hyper-parameters, uploads the weights into
// device memory through a direct allocator (category weights), and runs the
// Llama-family forward — Llama 2/3, Mistral, Qwen2/2.5 (QKV bias), Qwen3 (q/k
// norm), tied or separate output embeddings — over the device's kernel set.
//
// Memory discipline of the forward (spec §4): every activation comes from the
// caching allocator and is released when the layer that made it ends, so the
// activation peak is one layer's widest moment plus the residual stream, not
// the sum over layers; the LM head runs only on the rows whose logits are
// wanted (the last position of each sequence unless more are requested).
package model
