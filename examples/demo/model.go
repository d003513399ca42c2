package demo

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/megaflow/megaflow/examples/demo/agent"
)

// ModelName is the model the mock server says it serves (the one the
// agent asks for).
const ModelName = agent.ModelName

// tools are the shell commands the mock model asks the agent to run, one
// per step in turn: what a coding agent runs while it explores a
// repository (they work with busybox's sh and a POSIX sh alike).
var tools = []string{
	"ls -la repo",
	"find repo -type f | head -20",
	"grep -rn def repo | head -5",
	"wc -l repo/*.py",
	"cat repo/README",
	"grep -rn TODO repo | head -3",
	"echo '# fix' >> repo/patch.diff && cat repo/patch.diff | wc -l",
}

// ModelHandler returns a small OpenAI-compatible chat-completions server:
// POST /v1/chat/completions answers with one assistant message that calls
// the tool execute_bash with a shell command (chosen from the request's
// messages, deterministically), GET /v1/models lists ModelName, GET
// /health answers 200. It keeps no state besides a request counter and
// answers at once: the agent spends the step's time from the data.
func ModelHandler() http.Handler {
	var served atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok %d\n", served.Load())
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{"id": ModelName, "object": "model", "owned_by": "megaflow"}}})
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || len(req.Messages) == 0 {
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, map[string]any{"error": map[string]any{"message": "want a JSON body with a non-empty messages list", "type": "invalid_request_error"}})
			return
		}
		n := served.Add(1)
		h := fnv.New32a()
		for _, m := range req.Messages {
			h.Write([]byte(m.Content))
		}
		tool := tools[(int(h.Sum32())+len(req.Messages))%len(tools)]
		args, _ := json.Marshal(map[string]string{"command": tool})
		writeJSON(w, map[string]any{
			"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": time.Now().Unix(), "model": ModelName,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
				"role": "assistant", "content": "Let me look at the repository.",
				"tool_calls": []any{map[string]any{"id": fmt.Sprintf("call_%d", n), "type": "function",
					"function": map[string]any{"name": "execute_bash", "arguments": string(args)}}},
			}}},
			"usage": map[string]any{"prompt_tokens": 40 * len(req.Messages), "completion_tokens": 24, "total_tokens": 40*len(req.Messages) + 24},
		})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
