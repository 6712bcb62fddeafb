package grammar

import (
	"errors"
	"fmt"
	"sync"
)

// Set is a vocabulary's constraint state, as a plugin instance holds it:
// compiled Programs shared by key (every sequence of a request, and later
// requests with the same grammar, reuse one Program and its caches) and
// the open sequences by handle. It is safe for concurrent use.
type Set struct {
	vocab *Vocab
	opts  Options

	mu    sync.Mutex
	progs map[string]*setProgram
	idle  []string // keys of programs no sequence uses, oldest first
	seqs  map[int32]*setSeq
	next  int32
}

type setProgram struct {
	key  string
	p    *Program
	refs int
}

type setSeq struct {
	prog *setProgram
	m    *Matcher
}

// MaxIdlePrograms is how many programs a Set keeps after their last
// sequence closed, for the next request with the same grammar.
const MaxIdlePrograms = 16

// NewSet returns an empty Set over v.
func NewSet(v *Vocab, opts Options) *Set {
	return &Set{vocab: v, opts: opts, progs: map[string]*setProgram{}, seqs: map[int32]*setSeq{}}
}

// Vocab is the Set's vocabulary.
func (s *Set) Vocab() *Vocab { return s.vocab }

// ErrBadHandle is wrapped when a handle is not open.
var ErrBadHandle = errors.New("grammar: unknown sequence handle")

// Open starts a sequence of the program for key, compiling it with build
// on first use, and returns its handle (>= 1).
func (s *Set) Open(key string, build func() (*Grammar, error)) (int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, ok := s.progs[key]
	if !ok {
		g, err := build()
		if err != nil {
			return 0, err
		}
		p, err := Compile(g, s.vocab, s.opts)
		if err != nil {
			return 0, err
		}
		sp = &setProgram{key: key, p: p}
		s.progs[key] = sp
	}
	return s.add(sp, sp.p.Start()), nil
}

func (s *Set) add(sp *setProgram, m *Matcher) int32 {
	if sp.refs == 0 {
		for i, k := range s.idle {
			if k == sp.key {
				s.idle = append(s.idle[:i], s.idle[i+1:]...)
				break
			}
		}
	}
	sp.refs++
	s.next++
	if s.next <= 0 {
		s.next = 1
	}
	s.seqs[s.next] = &setSeq{prog: sp, m: m}
	return s.next
}

// Fork opens a sequence at h's position.
func (s *Set) Fork(h int32) (int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.seqs[h]
	if !ok {
		return 0, fmt.Errorf("%w %d", ErrBadHandle, h)
	}
	return s.add(q.prog, q.m.Clone()), nil
}

// Close ends h. A program whose last sequence closes stays cached among
// the MaxIdlePrograms most recent.
func (s *Set) Close(h int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.seqs[h]
	if !ok {
		return fmt.Errorf("%w %d", ErrBadHandle, h)
	}
	delete(s.seqs, h)
	if q.prog.refs--; q.prog.refs == 0 {
		s.idle = append(s.idle, q.prog.key)
		for len(s.idle) > MaxIdlePrograms {
			delete(s.progs, s.idle[0])
			s.idle = s.idle[1:]
		}
	}
	return nil
}

// Len reports how many sequences are open.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seqs)
}

// BeginStep trims every program's mask cache (Program.Trim). Masks a Step
// returns stay valid until the next BeginStep.
func (s *Set) BeginStep() {
	s.mu.Lock()
	progs := make([]*Program, 0, len(s.progs))
	for _, sp := range s.progs {
		progs = append(progs, sp.p)
	}
	s.mu.Unlock()
	for _, p := range progs {
		p.Trim()
	}
}

// Step advances h by token (unless token < 0) and returns its mask for a
// sequence with budget tokens left (0: no limit).
func (s *Set) Step(h, token int32, budget int) (Mask, error) {
	s.mu.Lock()
	q, ok := s.seqs[h]
	s.mu.Unlock()
	if !ok {
		return Mask{}, fmt.Errorf("%w %d", ErrBadHandle, h)
	}
	if token >= 0 {
		if err := q.m.Advance(token); err != nil {
			return Mask{}, err
		}
	}
	return q.m.Mask(budget)
}
