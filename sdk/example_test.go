package sdk_test

import (
	"fmt"

	"github.com/kvhost/kvhost/sdk"
)

// A pool's bytes per unit is the sum of its buffers; Check refuses any
// other number.
func ExamplePool_Check() {
	pool := sdk.Pool{Name: "kv", Kind: sdk.FullAttention, PageSize: 16, BytesPerUnit: 4096, Buffers: []sdk.Buffer{
		{Pool: "kv", Name: "k", Role: sdk.RoleK, Layer: 0, Shape: []int64{8, 128}, DType: "bf16"},
		{Pool: "kv", Name: "v", Role: sdk.RoleV, Layer: 0, Shape: []int64{8, 128}, DType: "bf16"},
	}}
	fmt.Println(pool.Check())
	pool.BytesPerUnit = 8192
	fmt.Println(pool.Check())
	// Output:
	// <nil>
	// sdk: pool kv: buffers add up to 4096 bytes per token but the pool declares 8192
}
