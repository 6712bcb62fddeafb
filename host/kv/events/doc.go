// Package events publishes the prefix cache's KV events for KV-aware
// routers (llm-d's KV-cache-aware scheduler behind the Gateway API
// Inference Extension, NVIDIA Dynamo, AIBrix) as vLLM does: BlockStored,
// BlockRemoved and AllBlocksCleared in msgpack batches (Encode, both of
// vLLM's layouts), one batch per engine step, over a ZeroMQ PUB socket
// (Publisher, with the pure-Go github.com/go-zeromq/zmq4), configured by
// vLLM's --kv-events-config JSON (Config).
//
// Invariants:
//   - Block hashes are vLLM's sha256_cbor chain (Hasher): equal hashes mean
//     equal token prefixes, and a router that hashes prompts with the same
//     seed (DefaultHashSeed unless told otherwise) finds the same values;
//     routers see the digest's last 8 bytes (External).
//   - The events follow the tree exactly: the blocks stored and not since
//     removed (or cleared) are the blocks the prefix cache holds.
//   - Publishing never blocks the engine: batches beyond max_queue_size
//     are dropped and counted; a subscriber detects the gap by the
//     sequence numbers and, with replay_endpoint, asks a ROUTER socket for
//     the batches from the first it missed (the last buffer_steps are kept;
//     replay.go). A replayed batch is byte for byte the one published under
//     that sequence number.
package events
