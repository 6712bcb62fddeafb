package tokenizer

import "testing"

func benchEncode(b *testing.B, tok Tokenizer, text string) {
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	var n int
	for b.Loop() {
		ids, err := tok.Encode(text, true)
		if err != nil {
			b.Fatal(err)
		}
		n = len(ids)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkEncodeSPM4KB(b *testing.B) {
	benchEncode(b, storiesSPM(b), english(4096))
}

func BenchmarkEncodeBPE4KB(b *testing.B) {
	tok, err := NewBPE(trainBPE(b, english(4096), 400, PreLlama3))
	if err != nil {
		b.Fatal(err)
	}
	benchEncode(b, tok, english(4096))
}

// BenchmarkEncodeSPM32kTokens encodes a prompt of about 32k tokens.
func BenchmarkEncodeSPM32kTokens(b *testing.B) {
	benchEncode(b, storiesSPM(b), english(32000*4))
}

func BenchmarkEncodeBPE32kTokens(b *testing.B) {
	tok, err := NewBPE(trainBPE(b, english(4096), 400, PreLlama3))
	if err != nil {
		b.Fatal(err)
	}
	benchEncode(b, tok, english(32000*4))
}

func BenchmarkStreamDecode(b *testing.B) {
	s := storiesSPM(b)
	ids, err := s.Encode(english(4096), false)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		sd := NewStreamDecoder(s, nil)
		for _, id := range ids {
			sd.Add(id)
		}
		sd.Flush()
	}
}
