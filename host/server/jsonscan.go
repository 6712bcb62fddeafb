package server

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
)

// maxJSONDepth bounds the nesting of a request body. The deepest body the
// API defines is a chat message's content part (depth 4); the margin leaves
// room for the unknown fields OpenAI clients send (tool schemas).
const maxJSONDepth = 64

// checkJSON walks body's tokens before it is unmarshalled and refuses what
// encoding/json would silently accept: an object with the same key twice
// (json.Unmarshal keeps the last, so a proxy that checked the first value
// would be fooled) and nesting deeper than maxJSONDepth. Syntax errors are
// left to json.Unmarshal, whose messages carry the byte offset.
func checkJSON(body []byte) error {
	type frame struct {
		obj     bool
		wantKey bool
		key     string // object: the current key
		idx     int    // array: the current element
		keys    map[string]struct{}
	}
	var stack []frame
	path := func() string {
		var b []byte
		for i, f := range stack {
			switch {
			case f.obj && i == 0:
				b = append(b, f.key...)
			case f.obj:
				b = append(append(b, '.'), f.key...)
			default:
				b = append(append(append(b, '['), strconv.Itoa(f.idx)...), ']')
			}
		}
		return string(b)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		t, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return nil // json.Unmarshal reports it
		}
		if d, ok := t.(json.Delim); ok && (d == '{' || d == '[') {
			if len(stack) >= maxJSONDepth {
				return badRequest(path(), "the body nests deeper than %d levels", maxJSONDepth)
			}
			stack = append(stack, frame{obj: d == '{', wantKey: d == '{'})
			continue
		}
		if d, ok := t.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
		} else if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			top := &stack[n-1]
			key, _ := t.(string)
			if _, dup := top.keys[key]; dup {
				top.key = key
				return badRequest(path(), "the key %q appears more than once in the same object", key)
			}
			if top.keys == nil {
				top.keys = make(map[string]struct{}, 8)
			}
			top.keys[key] = struct{}{}
			top.key, top.wantKey = key, false
			continue
		}
		// A value is complete: its parent wants the next key or element.
		if n := len(stack); n > 0 {
			if stack[n-1].obj {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].idx++
			}
		}
	}
}
