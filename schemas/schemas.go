// Package schemas holds the JSON Schemas (draft 2020-12) of the receiptflow
// contract and their examples. The schemas are the source of truth; Go code
// loads them from FS.
package schemas

import "embed"

// Names of the schema files in FS.
const (
	// EventV1 is the schema of a version 1 event record.
	EventV1 = "event.v1.schema.json"
	// EventV2 is the schema of a version 2 event record.
	EventV2 = "event.v2.schema.json"
	// Snapshot is the schema of a published window snapshot.
	Snapshot = "snapshot.schema.json"
)

// FS holds the schema files (named by EventV1, EventV2, Snapshot) and the
// examples under examples/ (valid/, invalid/ and snapshot/). It is
// read-only and safe for concurrent use.
//
//go:embed *.schema.json examples
var FS embed.FS
