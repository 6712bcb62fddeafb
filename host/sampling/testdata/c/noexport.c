/* noexport: has the handshake exports but no kvhost_sample. */
#include <stdint.h>
__attribute__((export_name("kvhost_abi_version"))) int32_t v(void) { return 1; }
__attribute__((export_name("kvhost_describe"))) int64_t d(void) { return 0; }
__attribute__((export_name("kvhost_sampler_init"))) int32_t i(int32_t a, int32_t b) { return 0; }
