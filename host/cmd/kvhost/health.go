package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func init() { extraCommands["health"] = healthCmd }

// healthCmd is `kvhost health`: GET /health of a running server, exit 0 on
// 200. It is the container image's HEALTHCHECK (the image has no shell and
// no curl) and works for any probe that runs a command.
func healthCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", stderr)
	def := "http://" + loopback(envOr("KVHOST_ADDR", "127.0.0.1:8080"))
	url := fs.String("url", def, "server to ask (default: KVHOST_ADDR on loopback)")
	path := fs.String("path", "/health", "route to ask: /health (alive) or /ready (admitting requests)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: kvhost health [--url URL] [--path /ready]\n\nExits 0 when the server answers 200, 1 otherwise (a container HEALTHCHECK).\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(*url, "/")+*path, nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s: %d %s", req.URL, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// loopback turns a listen address into one to dial: an unspecified host
// (0.0.0.0, ::, empty) becomes 127.0.0.1.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
