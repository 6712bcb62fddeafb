// Package model turns model files into a forward pass on a device.
//
// It reads GGUF files and Hugging Face directories (formats in gguf/,
// safetensors/, hf/; tokenizers in tokenizer/; chat templates in chat/),
// validates the architecture's hyper-parameters, uploads the weights into
// device memory through a direct allocator (category weights), and runs the
// forward over the device's kernel set.
//
// Architectures are registry entries (arch.go, one arch_<name>.go each,
// registered from init): GGUF and Hugging Face names, config parsing into
// Config (architecture-specific parameters in Config.Ext), tensor names,
// the per-layer structure and weights (Arch.Layers through a Builder), the
// layers' KV needs and the parameter count. The Llama family — Llama 2/3,
// Mistral, Qwen2/2.5 (QKV bias), Qwen3 (q/k norm), tied or separate output
// embeddings — is the first (arch_llama.go); Qwen3-MoE (arch_qwen3moe.go)
// and DeepSeek-V2/V3 (arch_deepseek.go: latent attention in the absorbed
// form over the MLA configurator's latent pool) add the routed experts
// (arch_moe.go: grouped by expert through the device's Experts
// capability). A layer is a sequence Mixer
// and a feed-forward FFN (parts.go), either absent where the architecture
// has none, each adding its branch to the residual stream through a Step
// (step.go) that serves both the eager forward and the captured decode
// step. Adding an architecture is adding files: arch_<name>.go with its
// entry and Layers, part_<what>.go for a new mixer or feed-forward part;
// the loaders, the forward, the decode graphs and host/plan pick it up
// from the registry (../shared/design/ARCHITECTURE.md §2: architectures
// written against the kernel set).
//
// ExportHF (hfexport*.go) is the loaders' inverse: a GGUF model written as
// the Hugging Face checkpoint llama.cpp's converter would have read, by the
// same name tables (Arch.HFTensor) and undoing each layout the HF loader
// undoes; its config.json must read back to the GGUF's Config
// (`kvhost gen-model --format hf`, the HF-vs-GGUF tests).
//
// Invariants:
//   - One forward. The eager Forward and the captured decode step run the
//     same layer loop (layersForward) and the same parts, so a new
//     architecture gets graph capture and plan's prediction for free, and
//     their allocation sequences cannot drift apart.
//   - Memory discipline (../shared/spec/memory-budget.md §4): every
//     activation comes from the caching allocator (Step.Buf) and is freed
//     when the part that made it ends, so the activation peak is one
//     layer's widest moment plus the residual stream, not the sum over
//     layers; the LM head runs only on the rows whose logits are wanted
//     (the last position of each sequence unless more are requested), in
//     chunks of LogitsChunk rows.
//   - The plan is the code. NewDry builds the same model over a dry device
//     (host/device/dry: shapes, no memory, no arithmetic) for host/plan,
//     which predicts the activation peak, workspaces and graph pool by
//     running Forward and CaptureDecodeGraphs; serve measures the same
//     sequence (host/boot TestPlanMatchesServe, to the byte).
//   - A warm eager decode step and a graph replay allocate nothing on the
//     Go heap: the model owns one Step and reuses it
//     (TestDecodeStepsDoNotAllocate).
package model
