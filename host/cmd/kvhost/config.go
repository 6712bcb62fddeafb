package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A command's settings come from three places, the first that has one
// winning: its flag on the command line, the environment variable
// KVHOST_<FLAG> (upper case, '-' → '_': --max-queue is KVHOST_MAX_QUEUE),
// and the YAML config file (--config FILE or KVHOST_CONFIG) whose keys are
// the flag names. Defaults fill the rest. settle applies that order to a
// parsed FlagSet and reports where each value came from.

// Sources of a setting, as the effective configuration prints them.
const (
	srcDefault = "default"
	srcFlag    = "flag"
	srcEnv     = "env"
	srcFile    = "file"
)

// secretFlags are printed masked.
var secretFlags = map[string]bool{"api-key": true, "admin-key": true}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return "KVHOST_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// settle fills every flag fs's command line left unset, from the
// environment (getenv) and then from the config file, and returns each
// flag's source. The "config" flag itself names the file and comes only
// from the command line or KVHOST_CONFIG. An unknown key in the file, or a
// value a flag refuses, is an error naming the key and the file.
func settle(fs *flag.FlagSet, getenv func(string) string) (map[string]string, error) {
	src := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { src[f.Name] = srcDefault })
	fs.Visit(func(f *flag.Flag) { src[f.Name] = srcFlag })

	file := ""
	if cf := fs.Lookup("config"); cf != nil {
		if src["config"] != srcFlag {
			if v := getenv("KVHOST_CONFIG"); v != "" {
				if err := cf.Value.Set(v); err != nil {
					return nil, err
				}
				src["config"] = srcEnv
			}
		}
		file = cf.Value.String()
	}
	var fromFile map[string]string
	if file != "" {
		var err error
		if fromFile, err = readConfigFile(file, fs); err != nil {
			return nil, err
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if src[f.Name] == srcFlag || f.Name == "config" {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
			src[f.Name] = srcEnv
			return
		}
		if v, ok := fromFile[f.Name]; ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("config %s: %s: %q: %w", file, f.Name, v, err))
			}
			src[f.Name] = srcFile
		}
	})
	return src, errors.Join(errs...)
}

// readConfigFile reads a YAML mapping of flag names (dashes or
// underscores) to scalars or lists of scalars (joined with commas).
func readConfigFile(path string, fs *flag.FlagSet) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var raw map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	out := map[string]string{}
	for k, v := range raw {
		name := strings.ReplaceAll(k, "_", "-")
		f := fs.Lookup(name)
		if f == nil || name == "config" {
			var known []string
			fs.VisitAll(func(f *flag.Flag) {
				if f.Name != "config" {
					known = append(known, f.Name)
				}
			})
			return nil, fmt.Errorf("config %s: unknown setting %q (settings are the flag names: %s)", path, k, strings.Join(known, ", "))
		}
		s, err := scalar(v)
		if err != nil {
			return nil, fmt.Errorf("config %s: %s: %w", path, k, err)
		}
		out[name] = s
	}
	return out, nil
}

func scalar(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := scalar(e)
			if err != nil {
				return "", err
			}
			if _, nested := e.([]any); nested {
				return "", errors.New("nested lists are not settings")
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("a %T is not a setting (use a scalar or a list of scalars)", v)
}

// effectiveConfig is the settled configuration as one log attribute group:
// every flag's value (secrets masked) and, for those not at their default,
// where the value came from.
func effectiveConfig(fs *flag.FlagSet, src map[string]string) slog.Attr {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	slices.Sort(names)
	attrs := make([]any, 0, len(names))
	for _, n := range names {
		v := fs.Lookup(n).Value.String()
		if secretFlags[n] && v != "" {
			v = "****"
		}
		if s := src[n]; s != srcDefault {
			v += " (" + s + ")"
		}
		attrs = append(attrs, slog.String(n, v))
	}
	return slog.Group("config", attrs...)
}
