package constraint_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/constraint/compile"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

// TestBackgroundWaitsForTheLoad: Open waits until the runner is loaded
// and then opens through it (the same masks as the runner itself); a
// context that ends first fails the Open and loses nothing; Name says
// "loading" until the load ends.
func TestBackgroundWaitsForTheLoad(t *testing.T) {
	toks := newByteTokens()
	release := make(chan struct{})
	bg := constraint.NewBackground(func() (constraint.Runner, error) {
		<-release
		return constraint.NewNativeFor(toks, len(toks), grammar.Options{})
	})
	defer bg.Close(context.Background())
	g, err := compile.Regex(`ab+`)
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t, "regex", g)
	if !strings.Contains(bg.Name(), "loading") {
		t.Fatalf("name while loading = %q", bg.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := bg.Open(ctx, sp); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("open before the load with an ending context: %v, want the deadline", err)
	}
	bg.Step(context.Background(), nil) // no rows: returns without waiting
	opened := make(chan error, 1)
	go func() {
		s, err := bg.Open(context.Background(), sp)
		if err == nil {
			s.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("open returned (%v) before the runner was loaded", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	<-bg.Ready()
	if bg.Name() != "grammar-native" {
		t.Fatalf("name once loaded = %q", bg.Name())
	}
	if eog := bg.EOG(); len(eog) != 1 || int(eog[0]) != len(toks)-1 {
		t.Fatalf("EOG = %v, want [%d]", eog, len(toks)-1)
	}
	// Stepping a sequence through the background runner gives what the
	// native runner gives.
	nat, err := constraint.NewNativeFor(toks, len(toks), grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := bg.Open(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := nat.Open(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ra, rb := []constraint.Row{{Seq: a, Token: -1}}, []constraint.Row{{Seq: b, Token: -1}}
	bg.Step(context.Background(), ra)
	nat.Step(context.Background(), rb)
	if ra[0].Err != nil || rb[0].Err != nil || len(ra[0].Mask) == 0 || !slices.Equal(ra[0].Mask, rb[0].Mask) {
		t.Fatalf("background step %+v, native %+v", ra[0], rb[0])
	}
}

// TestBackgroundLoadFailure: a load that fails fails every Open with its
// error, at once, and Close still returns.
func TestBackgroundLoadFailure(t *testing.T) {
	bad := errors.New("the plugin trapped")
	bg := constraint.NewBackground(func() (constraint.Runner, error) { return nil, bad })
	g, _ := compile.Regex(`a`)
	if _, err := bg.Open(context.Background(), spec(t, "regex", g)); !errors.Is(err, bad) {
		t.Fatalf("open after a failed load: %v, want the load's error", err)
	}
	if !strings.Contains(bg.Name(), "failed") {
		t.Fatalf("name after a failed load = %q", bg.Name())
	}
	if bg.EOG() != nil {
		t.Fatal("EOG after a failed load is not nil")
	}
	if err := bg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOnDemandLoadsOnFirstOpen: an on-demand runner loads nothing until
// the first Open (EOG and Name answer without starting or waiting), loads
// once however many Opens race, and a runner closed before any Open
// never loads and fails a later Open.
func TestOnDemandLoadsOnFirstOpen(t *testing.T) {
	toks := newByteTokens()
	loads := make(chan struct{}, 8)
	load := func() (constraint.Runner, error) {
		loads <- struct{}{}
		return constraint.NewNativeFor(toks, len(toks), grammar.Options{})
	}
	bg := constraint.NewOnDemand(load)
	if bg.Started() || bg.EOG() != nil || !strings.Contains(bg.Name(), "first constrained request") {
		t.Fatalf("before any Open: started %v, EOG %v, name %q", bg.Started(), bg.EOG(), bg.Name())
	}
	bg.Step(context.Background(), nil)
	select {
	case <-loads:
		t.Fatal("loaded before the first Open")
	case <-time.After(20 * time.Millisecond):
	}
	g, err := compile.Regex(`ab+`)
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t, "regex", g)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			s, err := bg.Open(context.Background(), sp)
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(loads) != 1 {
		t.Fatalf("%d loads for 4 Opens, want 1", len(loads))
	}
	if bg.Name() != "grammar-native" || len(bg.EOG()) != 1 {
		t.Fatalf("after the load: name %q, EOG %v", bg.Name(), bg.EOG())
	}
	if err := bg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	idle := constraint.NewOnDemand(load)
	if err := idle.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := idle.Open(context.Background(), sp); err == nil || !strings.Contains(err.Error(), "closed before it loaded") {
		t.Fatalf("open after closing an unloaded runner: %v", err)
	}
	if len(loads) != 1 {
		t.Fatal("a runner closed before any Open loaded")
	}
}
