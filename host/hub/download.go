package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Reporter receives a download's progress from the downloading goroutine:
// Begin once per file fetched (size in bytes, resumed = bytes already on
// disk from an earlier attempt), Add for each chunk written, End last.
type Reporter interface {
	Begin(file string, size, resumed int64)
	Add(n int64)
	End(file string, err error)
}

// ChecksumError is a download whose bytes do not match what the hub
// announced; the partial file is removed, nothing is cached.
type ChecksumError struct {
	File       string
	Algo       string // "sha256" or "git-sha1"
	Want, Have string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("hub: %s: %s mismatch: the hub announced %s, the download has %s (removed; run the pull again)", e.File, e.Algo, e.Want, e.Have)
}

// SizeError is a download whose length differs from the announced size.
type SizeError struct {
	File       string
	Want, Have int64
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("hub: %s: size mismatch: the hub announced %d bytes, the download has %d", e.File, e.Want, e.Have)
}

// digestFor says how a blob is verified: by its LFS sha256 when the hub
// gave one (model info or a 64-hex ETag), else by git's blob sha1 when the
// ETag is one (a small file stored in git).
func digestFor(m fileMeta, lfsSHA string) (algo, want string) {
	switch {
	case lfsSHA != "":
		return "sha256", strings.ToLower(lfsSHA)
	case isHex(m.etag, 64):
		return "sha256", strings.ToLower(m.etag)
	case isHex(m.etag, 40):
		return "git-sha1", strings.ToLower(m.etag)
	}
	return "", ""
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// verify hashes the file at p and checks its size and digest.
func verify(p, file string, size int64, algo, want string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if st.Size() != size {
		return &SizeError{File: file, Want: size, Have: st.Size()}
	}
	var h hash.Hash
	switch algo {
	case "sha256":
		h = sha256.New()
	case "git-sha1":
		h = sha1.New()
		fmt.Fprintf(h, "blob %d\x00", size)
	default:
		return fmt.Errorf("hub: %s: the hub's ETag %q is neither a sha256 nor a git sha1: refusing a file that cannot be verified", file, want)
	}
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hub: %s: %w", file, err)
	}
	if have := hex.EncodeToString(h.Sum(nil)); have != want {
		return &ChecksumError{File: file, Algo: algo, Want: want, Have: have}
	}
	return nil
}

// fetchBlob downloads one file into blobs/ETAG: under the blob's lock,
// into ETAG.incomplete, resuming with Range from what is there (an earlier
// run's partial file included) for up to Attempts tries, then checks size
// and digest and renames it into place.
func (c *Client) fetchBlob(ctx context.Context, repo, file string, m fileMeta, lfsSHA string) error {
	blob := c.cache.blobPath(repo, m.etag)
	if err := os.MkdirAll(blobDir(blob), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	unlock, err := c.cache.lock(repo, m.etag)
	if err != nil {
		return err
	}
	defer unlock()
	if st, err := os.Stat(blob); err == nil && st.Size() == m.size {
		return nil // another process finished it while we waited
	}
	algo, want := digestFor(m, lfsSHA)
	if algo == "" {
		return fmt.Errorf("hub: %s: the hub's ETag %q is neither a sha256 nor a git sha1: refusing a file that cannot be verified", file, m.etag)
	}
	part := blob + ".incomplete"
	wait := c.o.RetryWait
	for attempt := 1; attempt <= c.o.Attempts; attempt++ {
		retry, err := c.getRange(ctx, repo, file, m, part)
		if err == nil {
			break
		}
		if !retry || ctx.Err() != nil || attempt == c.o.Attempts {
			return err
		}
		c.log.Warn("download interrupted; resuming", "repo", repo, "file", file, "attempt", attempt, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait *= 2
	}
	if err := verify(part, file, m.size, algo, want); err != nil {
		_ = os.Remove(part)
		return err
	}
	if err := os.Rename(part, blob); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}

func blobDir(blob string) string { return blob[:strings.LastIndexByte(blob, os.PathSeparator)] }

// getRange appends the rest of the file to part. retry reports whether the
// failure is worth another attempt (a dropped connection, a 5xx), not a
// refusal (4xx).
func (c *Client) getRange(ctx context.Context, repo, file string, m fileMeta, part string) (retry bool, err error) {
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return false, fmt.Errorf("hub: %w", err)
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, fmt.Errorf("hub: %w", err)
	}
	if have > m.size {
		if err := f.Truncate(0); err != nil {
			return false, fmt.Errorf("hub: %w", err)
		}
		have, _ = f.Seek(0, io.SeekStart)
	}
	if have == m.size {
		return false, nil
	}
	req, err := c.request(ctx, http.MethodGet, m.location)
	if err != nil {
		return false, err
	}
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := c.do(req)
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, ok := rangeStart(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			// Not the range we asked for: start over.
			_ = f.Truncate(0)
			return true, fmt.Errorf("hub: %s: the server answered Content-Range %q to a request from byte %d", file, resp.Header.Get("Content-Range"), have)
		}
	case http.StatusOK:
		if have > 0 {
			// The server ignored Range: the body is the whole file.
			if err := f.Truncate(0); err != nil {
				return false, fmt.Errorf("hub: %w", err)
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return false, fmt.Errorf("hub: %w", err)
			}
			have = 0
		}
	case http.StatusRequestedRangeNotSatisfiable:
		_ = f.Truncate(0)
		return true, fmt.Errorf("hub: %s: range from byte %d not satisfiable; restarting", file, have)
	default:
		err := c.statusError(resp, repo, "download of "+file)
		return resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests, err
	}
	if c.o.Progress != nil {
		c.o.Progress.Begin(file, m.size, have)
	}
	n, err := io.Copy(f, &countingReader{r: resp.Body, rep: c.o.Progress})
	if err == nil && have+n < m.size {
		err = io.ErrUnexpectedEOF
	}
	if c.o.Progress != nil {
		c.o.Progress.End(file, err)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return false, err
		}
		return true, fmt.Errorf("hub: %s: transfer stopped at byte %d of %d: %w", file, have+n, m.size, err)
	}
	return false, nil
}

// rangeStart reads the first byte of "bytes START-END/TOTAL".
func rangeStart(cr string) (int64, bool) {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, false
	}
	start, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(start, 10, 64)
	return n, err == nil
}

type countingReader struct {
	r   io.Reader
	rep Reporter
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && c.rep != nil {
		c.rep.Add(int64(n))
	}
	return n, err
}
