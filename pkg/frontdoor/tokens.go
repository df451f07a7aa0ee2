package frontdoor

import "github.com/receiptflow/receiptflow/pkg/auth"

// Tokens are the bearer tokens a --tokens-file admits: one `name:sha256-hex`
// line per holder (the hex SHA-256 of the token, never the token itself;
// blank lines and lines starting with # are skipped). The file is read
// again when it changes, so removing a line revokes its token within a
// second. Safe for concurrent use. They live in pkg/auth, which the
// dashboard shares without depending on the ingest door.
type Tokens = auth.Tokens

// LoadTokens reads path; an unreadable or malformed file is an error
// naming the line.
func LoadTokens(path string) (*Tokens, error) { return auth.LoadTokens(path) }

// HashToken returns the tokens-file form of token's hash.
func HashToken(token string) string { return auth.HashToken(token) }
