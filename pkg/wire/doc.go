// Package wire is everything that crosses JetStream or a KV bucket between
// receiptflow's services: the stream, subject, bucket, key and consumer
// names of a generation, the message headers, and the message and KV
// bodies with their encodings.
//
// A service package (ingest, validator, windower, publisher, dashboard)
// imports wire and its own helpers, never another service: what one
// service writes and the next one reads is defined here, once.
//
//	RAW       ingest    -> validator   event JSON; HdrOrigSize, HdrHeartbeat
//	VALID     validator -> windower    event JSON; HdrRawSeq, HdrKind, HdrTime, HdrEventID, HdrHeartbeat
//	REJECTED  validator -> operators   event bytes; HdrRawSeq, HdrReason, HdrDetail
//	LATE      windower  -> operators   LateEvent
//	CHANGES   windower  -> publisher   Change
//	KV        publisher -> dashboard   Window under WindowKey, Day under DayKey, Health under HealthKey
package wire
