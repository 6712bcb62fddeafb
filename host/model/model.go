package model

import (
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/model/tokenizer"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// Model is a loaded model: its configuration, its weights in device memory,
// its tokenizer and chat template.
type Model struct {
	Name         string
	Path         string
	Config       Config
	Tokenizer    tokenizer.Tokenizer
	ChatTemplate string // "" when the model ships none
	BOSText      string
	EOSText      string
	// MappedBytes are the weight bytes served in place from the model
	// file (a device that maps files: the CPU device), not copied.
	MappedBytes int64
	// Notes are what serve says at startup about parts of the file it does
	// not load (a multimodal wrapper's vision tower); Config.Notes those of
	// the architecture.
	Notes []string

	dev     device.Device
	k       device.Kernels
	act     *alloc.Allocator
	weights *alloc.Direct
	ws      *alloc.Workspaces
	// attnScratch is the shared attention workspace, sized once at load for
	// the whole context so captured graphs never see it move.
	attnScratch device.Buf

	tokEmbd, outNorm, output device.Weight
	layers                   []Layer
	weightBytes              int64
	// owned are the weights' allocations (uploads and file mappings),
	// what Close frees; tensors what the architecture asked for.
	owned   []device.Ptr
	tensors []TensorShape
	// dry marks a model over a dry-run device (NewDry): no host buffers
	// are filled.
	dry bool
	// trunk are the transforms outside the layers (Builder.SetTrunk), run
	// on ew when set.
	trunk Trunk
	ew    device.Elementwise
	// step is the one Step every forward reuses (no Go-heap allocation
	// per forward).
	step Step

	// LogitsChunk bounds the rows of one LM-head matmul (input logprobs ask
	// for many); 0 means DefaultLogitsChunk.
	LogitsChunk int

	// host-side scratch reused by every forward (one goroutine owns the model)
	ids, positions, lastRows []int32
	// starts and stateSlots back an eager Step's StateBatch, one row of
	// slots per state pool
	starts     []int32
	stateSlots [][]int32
}

// DefaultLogitsChunk is SGLang's logprob chunk (spec §4).
const DefaultLogitsChunk = 2048

// Options say where a model's memory comes from.
type Options struct {
	Device device.Device
	// Weights receives the weights (category weights); Activations serves
	// every temporary of the forward.
	Weights     *alloc.Direct
	Activations *alloc.Allocator
	// Workspaces is the process-wide scratch registry; nil makes one over
	// Activations.
	Workspaces *alloc.Workspaces
	// Progress, when set, is called as weights upload (bytes done, total).
	Progress func(done, total int64)
}

func (o Options) validate() error {
	if o.Device == nil || o.Weights == nil || o.Activations == nil {
		return fmt.Errorf("model: options need a device, a weights allocator and an activation allocator")
	}
	return nil
}

// Kernels is the kernel set of the model's device.
func (m *Model) Kernels() device.Kernels { return m.k }

// WeightBytes is the device memory the weights occupy.
func (m *Model) WeightBytes() int64 { return m.weightBytes }

// Close frees the weights.
func (m *Model) Close() error {
	var first error
	for _, p := range m.owned {
		if err := m.weights.Free(p); err != nil && first == nil {
			first = err
		}
	}
	m.owned, m.layers = nil, nil
	if m.attnScratch.Ptr != 0 {
		m.ws.Close()
		m.attnScratch = device.Buf{}
	}
	return first
}

// tensorSource yields raw tensors by canonical (GGUF) name.
type tensorSource interface {
	// tensor returns the raw bytes, element type and dims (GGUF order: the
	// first dim is the row length) of a tensor, or ok=false when absent.
	tensor(name string) (raw []byte, typ device.DType, dims []int, ok bool, err error)
	progressTotal() int64
}

// fileBacked is the optional capability of a source whose tensors lie in a
// file: fileRange returns the open file and the byte offset of a tensor's
// data, which a device that maps files serves in place.
type fileBacked interface {
	fileRange(name string) (f *os.File, off int64, ok bool)
}

// uploader copies tensors into device memory, converting vectors to F32;
// matrices of a file-backed source are mapped in place instead when the
// weights' device can map files.
type uploader struct {
	m     *Model
	src   tensorSource
	o     Options
	done  int64
	total int64
}

func (u *uploader) matrix(name string, rows, cols int, required bool) (device.Weight, error) {
	return u.shaped(name, []int{cols, rows}, rows, cols, required)
}

// shaped loads a tensor of the given dims (GGUF order: the row length
// first) as a matrix of rows × cols: a stack of n [r, cols] matrices
// (dims {cols, r, n}) is rows = n·r.
func (u *uploader) shaped(name string, shape []int, rows, cols int, required bool) (device.Weight, error) {
	raw, typ, dims, ok, err := u.src.tensor(name)
	if err != nil {
		return device.Weight{}, err
	}
	if !ok {
		if required {
			return device.Weight{}, fmt.Errorf("model: tensor %s is missing", name)
		}
		return device.Weight{}, nil
	}
	if !slices.Equal(dims, shape) {
		return device.Weight{}, fmt.Errorf("model: tensor %s has shape %v, want %v (row length first)", name, dims, shape)
	}
	want, err := kcpu.DType(typ).RowBytes(cols)
	if err != nil {
		return device.Weight{}, fmt.Errorf("model: tensor %s: %w", name, err)
	}
	if int64(len(raw)) != int64(want)*int64(rows) {
		return device.Weight{}, fmt.Errorf("model: tensor %s holds %d bytes, %s [%d %d] needs %d", name, len(raw), typ, cols, rows, int64(want)*int64(rows))
	}
	w := device.Weight{Type: typ, Rows: rows, Cols: cols, Bytes: int64(len(raw))}
	if fb, ok := u.src.(fileBacked); ok && u.o.Weights.CanMapFiles() {
		// F32 rows are read as float32 in place: map only what is aligned
		// for that (GGUF aligns tensors to 32 bytes by default).
		if f, off, ok := fb.fileRange(name); ok && off%4 == 0 {
			return u.mapFile(name, f, off, w)
		}
	}
	return u.put(name, raw, w)
}

// mapFile serves a matrix from its file in place.
func (u *uploader) mapFile(name string, f *os.File, off int64, w device.Weight) (device.Weight, error) {
	p, err := u.o.Weights.MapFile(f, off, w.Bytes, alloc.Weights)
	if err != nil {
		return device.Weight{}, fmt.Errorf("model: map %s (%d bytes): %w", name, w.Bytes, err)
	}
	w.Ptr = p
	u.m.owned = append(u.m.owned, p)
	u.m.weightBytes += w.Bytes
	u.m.MappedBytes += w.Bytes
	u.progress(w.Bytes)
	return w, nil
}

func (u *uploader) progress(n int64) {
	u.done += n
	if u.o.Progress != nil {
		u.o.Progress(u.done, u.total)
	}
}

func (u *uploader) vector(name string, n int, required bool) (device.Weight, error) {
	raw, typ, dims, ok, err := u.src.tensor(name)
	if err != nil {
		return device.Weight{}, err
	}
	if !ok {
		if required {
			return device.Weight{}, fmt.Errorf("model: tensor %s is missing", name)
		}
		return device.Weight{}, nil
	}
	if len(dims) != 1 || dims[0] != n {
		return device.Weight{}, fmt.Errorf("model: tensor %s has shape %v, want [%d]", name, dims, n)
	}
	f32 := make([]float32, n)
	switch typ {
	case device.F32:
		if len(raw) != 4*n {
			return device.Weight{}, fmt.Errorf("model: tensor %s holds %d bytes, want %d", name, len(raw), 4*n)
		}
		for i := range f32 {
			f32[i] = math.Float32frombits(le32(raw[4*i:]))
		}
	case device.F16, device.BF16:
		if len(raw) != 2*n {
			return device.Weight{}, fmt.Errorf("model: tensor %s holds %d bytes, want %d", name, len(raw), 2*n)
		}
		for i := range f32 {
			h := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
			if typ == device.F16 {
				f32[i] = kcpu.F16ToF32(h)
			} else {
				f32[i] = kcpu.BF16ToF32(h)
			}
		}
	default:
		return device.Weight{}, fmt.Errorf("model: vector %s stored as %s; only f32, f16 and bf16 vectors are supported", name, typ)
	}
	bytes := make([]byte, 4*n)
	for i, f := range f32 {
		b := math.Float32bits(f)
		bytes[4*i], bytes[4*i+1], bytes[4*i+2], bytes[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
	}
	return u.put(name, bytes, device.Weight{Type: device.F32, Rows: 1, Cols: n, Bytes: int64(len(bytes))})
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func (u *uploader) put(name string, raw []byte, w device.Weight) (device.Weight, error) {
	p, err := u.o.Weights.Alloc(int64(len(raw)), alloc.Weights)
	if err != nil {
		return device.Weight{}, fmt.Errorf("model: upload %s (%d bytes): %w", name, len(raw), err)
	}
	if err := u.o.Device.Kernels().Upload(p, raw); err != nil {
		_ = u.o.Weights.Free(p)
		return device.Weight{}, fmt.Errorf("model: upload %s: %w", name, err)
	}
	w.Ptr = p
	u.m.owned = append(u.m.owned, p)
	u.m.weightBytes += int64(len(raw))
	u.progress(int64(len(raw)))
	return w, nil
}

// Workspaces is the scratch registry the model's kernels use.
func (m *Model) Workspaces() *alloc.Workspaces { return m.ws }
