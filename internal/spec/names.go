package spec

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The checks below return "" when a value is acceptable, else a problem
// that completes the sentence "<field>: ..." and says what to do.

// Lengths of free-form values, in bytes.
const (
	maxGraphNameLen  = 256
	maxLabelKeyLen   = 128
	maxLabelValueLen = 256
	maxImageLen      = 512
	maxPathLen       = 4096
	maxTypeLen       = 32
	maxGPUModelLen   = 64
	maxNetworkLen    = 64
	maxCapabilityLen = 32
	maxEnvKeyLen     = 256
	maxReadinessPath = 1024
)

func isAlnum(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

func isIdentByte(b byte) bool { return isAlnum(b) || b == '.' || b == '_' || b == '-' }

// badRune describes the first character of s for which ok is false, or ""
// when there is none. Invalid UTF-8 is always bad.
func badRune(s string, ok func(r rune) bool) string {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return fmt.Sprintf("invalid UTF-8 at byte %d", i)
			}
		}
		if !ok(r) {
			return fmt.Sprintf("%q at byte %d", r, i)
		}
	}
	return ""
}

func identRune(r rune) bool { return r < utf8.RuneSelf && isIdentByte(byte(r)) }

// identProblem checks an identifier: a graph id, tenant, task name or
// session. [A-Za-z0-9._-], 1 to max bytes, not starting with '.' or '-' (so
// that "." and ".." are never names, and a name is never taken for a flag).
func identProblem(s string, max int) string {
	if s == "" {
		return "is empty; use 1 to " + fmt.Sprint(max) + " letters, digits, '.', '_' or '-'"
	}
	if len(s) > max {
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(s), max)
	}
	if bad := badRune(s, identRune); bad != "" {
		return fmt.Sprintf("%q has %s; use only ASCII letters, digits, '.', '_' and '-'", s, bad)
	}
	if s[0] == '.' || s[0] == '-' {
		return fmt.Sprintf("%q starts with %q; start with a letter, digit or '_'", s, s[0])
	}
	return ""
}

// serviceNameProblem checks a service name such as "model/qwen-7b":
// identifiers (see identProblem) joined by single '/', 1 to max bytes.
func serviceNameProblem(s string, max int) string {
	if s == "" {
		return "is empty; name the service, e.g. \"model/qwen-7b\""
	}
	if len(s) > max {
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(s), max)
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == "" {
			return fmt.Sprintf("%q has an empty part; join parts with single '/', with none at either end", s)
		}
		if p := identProblem(seg, max); p != "" {
			return fmt.Sprintf("%q: part %s", s, p)
		}
	}
	return ""
}

// labelKeyProblem checks a label or node selector key such as
// "megaflow.io/zone": [A-Za-z0-9._/-], 1 to 128 bytes, starting and ending
// with a letter or digit.
func labelKeyProblem(k string) string {
	if k == "" {
		return "empty key; keys are 1 to 128 letters, digits, '.', '_', '/' or '-'"
	}
	if len(k) > maxLabelKeyLen {
		return fmt.Sprintf("key %.20q... is %d bytes long; the limit is %d", k, len(k), maxLabelKeyLen)
	}
	if bad := badRune(k, func(r rune) bool { return identRune(r) || r == '/' }); bad != "" {
		return fmt.Sprintf("key %q has %s; use only ASCII letters, digits, '.', '_', '/' and '-'", k, bad)
	}
	if !isAlnum(k[0]) || !isAlnum(k[len(k)-1]) {
		return fmt.Sprintf("key %q must start and end with a letter or digit", k)
	}
	return ""
}

// textProblem checks free text (a graph name, a label value): valid UTF-8
// without control characters, at most max bytes.
func textProblem(s string, max int) string {
	if len(s) > max {
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(s), max)
	}
	if bad := badRune(s, func(r rune) bool { return !unicode.IsControl(r) }); bad != "" {
		return fmt.Sprintf("%q has %s; use printable UTF-8 text", s, bad)
	}
	return ""
}

// argProblem checks a command argument or environment value: valid UTF-8
// (the wire encoding requires it) without NUL bytes (exec cannot pass them).
func argProblem(s string) string {
	if bad := badRune(s, func(r rune) bool { return r != 0 }); bad != "" {
		return fmt.Sprintf("%.40q has %s; arguments and values cannot hold NUL bytes or invalid UTF-8", s, bad)
	}
	return ""
}

// envKeyProblem checks an environment variable name: [A-Za-z_][A-Za-z0-9_]*.
func envKeyProblem(k string) string {
	if k == "" {
		return "empty name; name variables with letters, digits and '_', not starting with a digit"
	}
	if len(k) > maxEnvKeyLen {
		return fmt.Sprintf("name %.20q... is %d bytes long; the limit is %d", k, len(k), maxEnvKeyLen)
	}
	if bad := badRune(k, func(r rune) bool { return r < utf8.RuneSelf && (isAlnum(byte(r)) || r == '_') }); bad != "" {
		return fmt.Sprintf("name %q has %s; use only ASCII letters, digits and '_'", k, bad)
	}
	if '0' <= k[0] && k[0] <= '9' {
		return fmt.Sprintf("name %q starts with a digit; start with a letter or '_'", k)
	}
	return ""
}

// typeProblem checks a task type (queue): "" or a lowercase letter followed
// by up to 31 lowercase letters, digits or '-', not ending with '-'.
func typeProblem(s string) string {
	if s == "" {
		return ""
	}
	hint := fmt.Sprintf("use %q, %q, %q, \"\" (the default queue) or a custom queue name of 1 to %d lowercase letters, digits or '-' starting with a letter",
		TypeTrain, TypeEval, TypeSynth, maxTypeLen)
	if len(s) > maxTypeLen {
		return fmt.Sprintf("%q is %d bytes long; %s", s, len(s), hint)
	}
	if bad := badRune(s, func(r rune) bool { return 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' }); bad != "" {
		return fmt.Sprintf("%q has %s; %s", s, bad, hint)
	}
	if s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '-' {
		return fmt.Sprintf("%q must start with a letter and not end with '-'; %s", s, hint)
	}
	return ""
}

// imageProblem checks a container image reference loosely: 1 to 512 bytes,
// printable ASCII without spaces, not starting with '-'. The runtime checks
// the rest when it pulls.
func imageProblem(s string) string {
	if s == "" {
		return "is empty; name a container image, e.g. \"python:3.12-slim\""
	}
	if len(s) > maxImageLen {
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(s), maxImageLen)
	}
	if bad := badRune(s, func(r rune) bool { return r > ' ' && r < 0x7f }); bad != "" {
		return fmt.Sprintf("%q has %s; an image reference is printable ASCII without spaces", s, bad)
	}
	if s[0] == '-' {
		return fmt.Sprintf("%q starts with '-'; give an image reference such as \"python:3.12-slim\"", s)
	}
	return ""
}

// gpuModelProblem checks a GPU model filter such as "H100" or "A100-SXM4":
// up to 64 ASCII letters, digits, spaces, '.', '_' or '-'.
func gpuModelProblem(s string) string {
	if len(s) > maxGPUModelLen {
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(s), maxGPUModelLen)
	}
	if bad := badRune(s, func(r rune) bool { return identRune(r) || r == ' ' }); bad != "" {
		return fmt.Sprintf("%q has %s; use ASCII letters, digits, spaces, '.', '_' and '-', e.g. \"H100\"", s, bad)
	}
	return ""
}

// networkProblem checks a container network: "none", "bridge", "host" or a
// user-defined network name, [A-Za-z0-9][A-Za-z0-9._-]*, 1 to 64 bytes.
// "" means the default (Normalize: "bridge" for a service or a task using
// services, else "none"). Forms such as "container:<id>" are refused.
func networkProblem(s string) string {
	if s == "" {
		return ""
	}
	hint := "use \"none\" (the default), \"bridge\", \"host\" or the name of a network the workers define"
	if len(s) > maxNetworkLen {
		return fmt.Sprintf("is %d bytes long; the limit is %d; %s", len(s), maxNetworkLen, hint)
	}
	if bad := badRune(s, identRune); bad != "" {
		return fmt.Sprintf("%q has %s; %s", s, bad, hint)
	}
	if !isAlnum(s[0]) {
		return fmt.Sprintf("%q must start with a letter or digit; %s", s, hint)
	}
	return ""
}

// capabilityProblem checks a Linux capability name, with or without the
// "CAP_" prefix: uppercase ASCII letters, digits and '_', starting with a
// letter, e.g. "NET_ADMIN".
func capabilityProblem(c string) string {
	name := canonicalCapability(c)
	if name == "" {
		return fmt.Sprintf("%q names no capability; give a name such as \"NET_ADMIN\"", c)
	}
	if len(name) > maxCapabilityLen {
		return fmt.Sprintf("%q is %d bytes long without \"CAP_\"; the limit is %d", c, len(name), maxCapabilityLen)
	}
	if bad := badRune(name, func(r rune) bool { return 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' }); bad != "" {
		return fmt.Sprintf("%q has %s; write capabilities in upper case, e.g. \"NET_ADMIN\" or \"CAP_NET_ADMIN\"", c, bad)
	}
	if name[0] < 'A' || name[0] > 'Z' {
		return fmt.Sprintf("%q must start with a letter, e.g. \"NET_ADMIN\"", c)
	}
	return ""
}

// absPathProblem checks a working directory: absolute, clean, without NUL
// bytes, at most 4096 bytes.
func absPathProblem(p string) string {
	if p == "" {
		return ""
	}
	if q := pathTextProblem(p); q != "" {
		return q
	}
	if !strings.HasPrefix(p, "/") {
		return fmt.Sprintf("%q is relative; give an absolute path such as \"/workspace\"", p)
	}
	if c := path.Clean(p); c != p {
		return fmt.Sprintf("%q is not clean; write it as %q", p, c)
	}
	return ""
}

// relPathProblem checks an output path: relative (to the output
// directory), clean, not leaving it through "..", without NUL bytes, 1 to
// 4096 bytes. "." (the whole output directory) is allowed.
func relPathProblem(p string) string {
	if p == "" {
		return "is empty; give a path relative to the output directory ($MEGAFLOW_OUTPUT_DIR), e.g. \"metrics.json\""
	}
	if q := pathTextProblem(p); q != "" {
		return q
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Sprintf("%q is absolute; give a path relative to the output directory ($MEGAFLOW_OUTPUT_DIR), e.g. %q", p, strings.TrimLeft(p, "/"))
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return fmt.Sprintf("%q leaves the output directory through \"..\"; collect only files below it", p)
	}
	if c != p {
		return fmt.Sprintf("%q is not clean; write it as %q", p, c)
	}
	return ""
}

func pathTextProblem(p string) string {
	if len(p) > maxPathLen {
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(p), maxPathLen)
	}
	if bad := badRune(p, func(r rune) bool { return r != 0 }); bad != "" {
		return fmt.Sprintf("%q has %s", p, bad)
	}
	return ""
}

// readinessPathProblem checks an HTTP readiness path: "" or starting with
// '/', printable ASCII without spaces, at most 1024 bytes.
func readinessPathProblem(p string) string {
	if p == "" {
		return ""
	}
	if len(p) > maxReadinessPath {
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(p), maxReadinessPath)
	}
	if bad := badRune(p, func(r rune) bool { return r > ' ' && r < 0x7f }); bad != "" {
		return fmt.Sprintf("%q has %s; give a URL path such as \"/health\"", p, bad)
	}
	if p[0] != '/' {
		return fmt.Sprintf("%q does not start with '/'; give a URL path such as \"/health\"", p)
	}
	return ""
}
