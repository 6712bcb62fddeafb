// Package hub fetches models from the Hugging Face Hub over its HTTP API and
// keeps them in the cache layout huggingface_hub uses, so a file downloaded
// by kvhost is reused by Python tools (transformers, vLLM, llama.cpp's -hf)
// and the other way round.
//
// # The cache (huggingface_hub's layout, not a copy of it)
//
//	$HF_HUB_CACHE (default $HF_HOME/hub, HF_HOME default ~/.cache/huggingface)
//	  models--ORG--NAME/
//	    blobs/ETAG                 the file's bytes; ETAG is its sha256 for LFS
//	                               files, its git blob sha1 otherwise
//	    blobs/ETAG.incomplete      a download in progress (resumed with Range)
//	    refs/REVISION              the commit hash REVISION ("main") pointed at
//	    snapshots/COMMIT/PATH      a relative symlink to ../../blobs/ETAG
//	  .locks/models--ORG--NAME/ETAG.lock   flock held while ETAG downloads
//
// Invariants:
//   - A blob exists only after its size and digest were checked against what
//     the hub announced (X-Linked-Size / Content-Length, and the ETag: sha256
//     for LFS files, git's "blob N\0" sha1 otherwise); a mismatch removes the
//     partial file and is an error, never a cached file.
//   - A snapshot link exists only for a complete, verified blob, and a ref is
//     written only once every file of the pull is in place.
//   - A split GGUF (llama.cpp's gguf-split shards NAME-00001-of-0000N.gguf,
//     grouped by GGUFModels) is one model: selected by its first shard's
//     name, pulled shard by shard (each under the rules above), refused
//     naming the shard when one is missing; Result.Model is its first shard.
//   - Offline mode (Options.Offline, HF_HUB_OFFLINE=1) sends no request: it
//     resolves refs and snapshots on disk or fails naming what is missing.
//   - The token (HF_TOKEN) is sent to the hub's own host only: a redirect to
//     a CDN on another host goes without it.
//
// Requests follow the hub's public routes: GET /api/models/REPO/revision/REV
// (the commit and the file list with sizes and LFS sha256s), HEAD
// /REPO/resolve/REV/PATH (X-Repo-Commit, X-Linked-Etag, X-Linked-Size and
// a Location on another host for LFS files), then GET of that location with
// Range to resume. The endpoint defaults to https://huggingface.co
// (HF_ENDPOINT overrides it; the tests run a fake hub with httptest).
//
// Environment variables are read by host/cmd, which passes them to
// OptionsFromEnv; this package reads none itself.
package hub
