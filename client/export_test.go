package client

// SessionIndex exposes the client's session index to the external tests.
func SessionIndex(c *Client) uint64 { return c.sessionIndex() }
