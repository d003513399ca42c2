// Package s3fake runs an in-process S3 protocol server for tests
// (github.com/johannesboyne/gofakes3 with its in-memory backend) on
// loopback, with switches to take it down. Only tests import it.
//
// gofakes3 v1.2.0 serves path-style requests (use path_style=true), keeps
// user metadata and content types, does multipart uploads, and checks
// Content-MD5 when a client sends one; it does not decode aws-chunked
// payloads with checksum trailers (the s3blob package turns those off) and
// does not check x-amz-checksum-* headers.
package s3fake

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Mode is how the server answers.
type Mode int32

const (
	// Up serves requests.
	Up Mode = iota
	// Unavailable answers every request 503 SlowDown, as an overloaded or
	// restarting server does.
	Unavailable
	// Refuse closes every connection without an answer, as a dead server
	// behind a load balancer does.
	Refuse
)

// Server is a running fake S3 server. Its methods are safe for concurrent
// use.
type Server struct {
	// URL is the endpoint, "http://127.0.0.1:port".
	URL     string
	Backend *s3mem.Backend
	ts      *httptest.Server
	mode    atomic.Int32
	mu      sync.Mutex
	reqs    []string
	hook    func(r *http.Request) (status int, body string)
}

// Start starts a server with the given buckets; the caller closes it.
func Start(buckets ...string) (*Server, error) {
	s := &Server{Backend: s3mem.New()}
	for _, b := range buckets {
		if err := s.Backend.CreateBucket(b); err != nil {
			return nil, fmt.Errorf("s3fake: create bucket %q: %w", b, err)
		}
	}
	faker := gofakes3.New(s.Backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	inner := faker.Server()
	s.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		hook := s.hook
		s.mu.Unlock()
		switch Mode(s.mode.Load()) {
		case Unavailable:
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>down for the test</Message></Error>`)
			return
		case Refuse:
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.(*net.TCPConn).SetLinger(0)
					c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		if hook != nil {
			if status, body := hook(r); status != 0 {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, body)
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	s.URL = s.ts.URL
	return s, nil
}

// StoreURL returns "s3://bucket/prefix?endpoint=...&path_style=true&region=us-east-1".
func (s *Server) StoreURL(bucket, prefix string) string {
	q := url.Values{"endpoint": {s.URL}, "path_style": {"true"}, "region": {"us-east-1"}}
	return (&url.URL{Scheme: "s3", Host: bucket, Path: "/" + prefix, RawQuery: q.Encode()}).String()
}

// SetMode switches how the server answers from the next request on.
func (s *Server) SetMode(m Mode) { s.mode.Store(int32(m)) }

// SetHook installs a function that sees every request while the server is
// Up; a non-zero status is answered with body instead of serving the
// request. nil removes it. A hook that reads r.Body must restore it.
func (s *Server) SetHook(hook func(r *http.Request) (status int, body string)) {
	s.mu.Lock()
	s.hook = hook
	s.mu.Unlock()
}

// Requests returns "METHOD /path?query" of every request so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// Corrupt replaces the bytes of bucket/key with b, keeping its metadata
// (and so its recorded SHA-256), as bit rot on the server would.
func (s *Server) Corrupt(bucket, key string, b []byte) error {
	obj, err := s.Backend.GetObject(bucket, key, nil)
	if err != nil {
		return err
	}
	obj.Contents.Close()
	_, err = s.Backend.PutObject(bucket, key, obj.Metadata, bytes.NewReader(b), int64(len(b)), nil)
	return err
}

// Close stops the server.
func (s *Server) Close() { s.ts.Close() }
