package tokenizer

import "unicode/utf8"

// StreamDecoder turns generated ids into text incrementally. Bytes that end
// in an incomplete UTF-8 sequence (byte tokens spelling a multi-byte
// character) are held back until the sequence completes, so every Add result
// is whole characters; invalid bytes are passed through, never held forever.
// The concatenation of all Add results and Flush equals Decode of the same
// ids (applied after the prompt). Not safe for concurrent use.
type StreamDecoder struct {
	d       detok
	pending []byte
}

// NewStreamDecoder starts a decoder for ids that follow prompt. The prompt
// is only used to decide the SentencePiece leading-space rule: when it
// already produced text, the first generated token keeps its leading space
// (" time" after "Once upon a"); with an empty or control-only prompt the
// output matches Decode of the generated ids alone.
func NewStreamDecoder(t Tokenizer, prompt []int32) *StreamDecoder {
	sd := &StreamDecoder{d: detok{t: t, strip: stripsLeadingSpace(t)}}
	for _, id := range prompt {
		if !sd.d.strip {
			break
		}
		if len(t.TokenBytes(id)) > 0 {
			sd.d.strip = false
		}
	}
	return sd
}

// Add appends id and returns the text it completes (possibly "").
func (sd *StreamDecoder) Add(id int32) string {
	sd.pending = sd.d.append(sd.pending, id)
	cut := completeUpTo(sd.pending)
	if cut == 0 {
		return ""
	}
	s := string(sd.pending[:cut])
	sd.pending = append(sd.pending[:0], sd.pending[cut:]...)
	return s
}

// Flush returns whatever is held back, complete or not.
func (sd *StreamDecoder) Flush() string {
	s := string(sd.pending)
	sd.pending = sd.pending[:0]
	return s
}

// completeUpTo returns how many leading bytes of b can be emitted: all of b
// unless it ends in a proper prefix of a valid UTF-8 encoding.
func completeUpTo(b []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		p := len(b) - k
		if b[p]&0xC0 == 0x80 {
			continue // continuation byte: look further back for the lead
		}
		if !utf8.FullRune(b[p:]) {
			return p
		}
		return len(b)
	}
	return len(b)
}
