// Package agent holds what the demo's coding agent does at each step,
// apart from where it runs: the conversation it keeps with the model, the
// chat completion that answers the next tool command, the trajectory line
// it records and the reward its evaluation computes. cmd/megaflow-agent
// runs it inside a rollout's task (`megaflow demo`, graph mode); `megaflow
// demo --mode sandbox` runs it in the client process and execs each
// command into the rollout's sandbox. Both therefore ask the mock model
// the same questions and get the same commands.
//
// It imports the standard library only: the agent goes into every demo
// image as a small static program (internal/deptest).
package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// ModelName is the model the agent asks for and the mock server says it
// serves.
const ModelName = "megaflow-demo-coder"

// Bounds of the conversation.
const (
	// MaxMessages is how many messages a request carries at most: the
	// first two (the task) and the latest ones.
	MaxMessages = 8
	// MaxObservation is how many bytes of a tool's output go back to the
	// model.
	MaxObservation = 200
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Conversation is the agent's side of the chat: the task, then each tool
// command and what it printed. Not safe for concurrent use: one rollout
// attempt owns it.
type Conversation struct {
	messages []Message
}

// NewConversation starts the conversation of a rollout of instance (a
// SWE-Gym instance id): the system prompt and the task.
func NewConversation(instance string) *Conversation {
	return &Conversation{messages: []Message{
		{Role: "system", Content: "You are a software engineering agent. Use execute_bash."},
		{Role: "user", Content: "Resolve the issue of " + instance + " in ./repo."},
	}}
}

// Messages returns the messages the next request carries. The caller must
// not modify them.
func (c *Conversation) Messages() []Message { return c.messages }

// Observe adds a tool call and its outcome: the command, its exit code and
// the first MaxObservation bytes of its output. It keeps the first two
// messages and the latest ones, MaxMessages in all.
func (c *Conversation) Observe(cmd string, exitCode int, output []byte) {
	if len(output) > MaxObservation {
		output = output[:MaxObservation]
	}
	c.messages = append(c.messages, Message{Role: "assistant", Content: "execute_bash: " + cmd},
		Message{Role: "user", Content: "exit " + strconv.Itoa(exitCode) + ": " + string(output)})
	if len(c.messages) > MaxMessages {
		c.messages = append(c.messages[:2], c.messages[len(c.messages)-(MaxMessages-2):]...)
	}
}

// Model is a client of an OpenAI-compatible chat-completions endpoint
// whose answers call the tool execute_bash.
type Model struct {
	// URL is the endpoint, http://host:port (no trailing slash).
	URL string
	// HTTP makes the requests; nil: a client with a 30 s timeout.
	HTTP *http.Client
}

// Next posts one chat completion with messages and returns the command of
// the answer's execute_bash tool call. It tries three times on connection
// errors (200 and 400 ms apart); an HTTP error or an answer without a
// command is not retried. Errors name what was wrong; ctx's error ends it.
func (m *Model) Next(ctx context.Context, messages []Message) (string, error) {
	hc := m.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	body, err := json.Marshal(map[string]any{"model": ModelName, "messages": messages, "tools": []any{map[string]any{
		"type": "function", "function": map[string]any{"name": "execute_bash", "parameters": map[string]any{"type": "object"}}}}})
	if err != nil {
		return "", err
	}
	var lastErr error
	for try := range 3 {
		if try > 0 {
			if err := Sleep(ctx, time.Duration(try)*200*time.Millisecond); err != nil {
				return "", err
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			lastErr = err
			continue
		}
		var cc struct {
			Choices []struct {
				Message struct {
					ToolCalls []struct {
						Function struct {
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		err = json.NewDecoder(bufio.NewReader(io.LimitReader(res.Body, 1<<20))).Decode(&cc)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return "", fmt.Errorf("HTTP %s", res.Status)
		}
		if err != nil || len(cc.Choices) == 0 || len(cc.Choices[0].Message.ToolCalls) == 0 {
			return "", fmt.Errorf("the answer holds no tool call (%v)", err)
		}
		var a struct {
			Command string `json:"command"`
		}
		if err := json.Unmarshal([]byte(cc.Choices[0].Message.ToolCalls[0].Function.Arguments), &a); err != nil || a.Command == "" {
			return "", fmt.Errorf("tool call arguments %q hold no command", cc.Choices[0].Message.ToolCalls[0].Function.Arguments)
		}
		return a.Command, nil
	}
	return "", lastErr
}

// Step is one line of a rollout's trajectory (trajectory.jsonl): an agent
// step, or, with End set, the line that ends the rollout.
type Step struct {
	// Step counts from 1.
	Step int `json:"step"`
	// Attempt is the rollout attempt, from 1.
	Attempt int `json:"attempt"`
	// ModelMillis is how long the model took to answer, in milliseconds.
	ModelMillis int64 `json:"model_ms"`
	// Tool is the shell command the model answered.
	Tool string `json:"tool,omitempty"`
	// ToolExit is the command's exit code.
	ToolExit int `json:"tool_exit"`
	// OutputBytes is the size of the command's output.
	OutputBytes int `json:"output_bytes"`
	// End, on the last line only: "finished" or "step-limit".
	End string `json:"end,omitempty"`
}

// Evaluation is what the eval step makes of a trajectory.
type Evaluation struct {
	// Steps is the number of agent steps.
	Steps int
	// End is the end line's End ("" without one).
	End string
	// Reward is 1 when the agent finished within its step limit (End
	// "finished" after at least one step), else 0.
	Reward int
}

// Evaluate reads a trajectory (JSON lines of Step) and scores it. Errors
// name the line that is not a Step.
func Evaluate(r io.Reader) (Evaluation, error) {
	var e Evaluation
	dec := json.NewDecoder(r)
	for {
		var s Step
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Evaluation{}, fmt.Errorf("trajectory line %d: %w", e.Steps+1, err)
		}
		if s.End != "" {
			e.End = s.End
		} else {
			e.Steps++
		}
	}
	if e.End == "finished" && e.Steps > 0 {
		e.Reward = 1
	}
	return e, nil
}

// Sleep waits d, or until ctx ends (then it returns ctx's error). A d of
// zero or less returns at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
