// Command firstgo is a test sampler written with the Go guest library: it
// returns the candidate at rank Params[0] (clamped), exercising the Go
// guest exports and the host's WASI support for Go guests.
package main

import (
	"github.com/kvhost/kvhost/sdk/sampler"
	"github.com/kvhost/kvhost/sdk/sampler/guest"
)

func init() {
	guest.Register(sampler.Descriptor{
		Name: "firstgo", Version: "1.0.0", Candidates: 8, History: 4, State: 1,
		PreOps: []string{sampler.PreOpTemperature},
		Params: []sampler.Param{{Name: "rank", Type: sampler.TypeInt, Min: 0, Max: 7, Default: 0}},
	}, func(r *guest.Row) (int32, float32, error) {
		i := min(int(r.Params[0]), len(r.IDs)-1)
		r.State[0]++
		return r.IDs[i], r.Logprobs[i], nil
	})
}

func main() {}
