// Package stream sets up the JetStream streams and consumers of a
// deployment, runs the one consume loop of the project (Consume), and
// writes streams in order (Committer, GroupPublisher, PublishInOrder) or
// pipelined (PublishAll).
//
// # The consume loop
//
// Consume (docs/spec.md §4) opens the durable consumer of a ConsumerSpec
// (Open), pulls from it, hands batches to the handler in delivery order,
// and acknowledges a batch only after the handler returned nil for it,
// never a message the handler has not processed. The caller must own the
// consumer exclusively; Consume must not run twice at once on one durable.
//
// The invariant it relies on (nats-server v2.15 consumer.go, deliverMsg):
// the consumer leader numbers every delivery, redeliveries included, with
// the next consumer sequence (Msg.Metadata().Sequence.Consumer), and
// restores that counter and the pending set from its store when it starts.
// So a reader that owns the consumer and sees consumer sequences go up by
// exactly one has seen every delivery. A server restart breaks that in two
// ways: deliveries in flight when it died are recorded as delivered but
// never arrive (the next sequence jumps forward, and an AckAll of the next
// message would acknowledge the lost ones), or the stored counter is older
// than what was delivered (the sequence goes back). Redeliveries (ack wait
// expired, or restored pending after a restart) come with new consumer
// sequences but old stream sequences.
//
// Hence, per delivery session (one Open): the first delivery must carry the
// consumer sequence after the one the consumer reported when opened, every
// next one the sequence after it, and, on an AckAll consumer, a stream
// sequence above every one already handed to the handler. A delivery that
// breaks this is a gap: the messages before it are processed and
// acknowledged as usual, it and everything after it are discarded
// unacknowledged, and the consumer is opened again (recreated by Open) at
// the checkpoint: after the last message the handler processed, or at
// ConsumerSpec.StartSeq if it processed none. So on an AckAll consumer a
// redelivery never reaches the handler (it is dropped, and the checkpoint
// skips it); on an explicit-ack consumer redeliveries are handed to the
// handler, which must be idempotent (the stream sequence is not checked,
// and a re-open resumes after the ack floor). A broker that came back
// without the consumer (a crash lost its directory) never says so: when
// the pulls miss heartbeats or find no responder, the loop asks for the
// consumer and re-opens it at the checkpoint if the broker lacks it.
//
// The consumer Open returns must also start at the checkpoint, and the
// broker does not always give the one asked for: a SIGKILL that cuts a
// consumer's delete short can leave its state file behind, and nats-server
// takes that state up when it next creates a durable of the name (a new
// consumer, already "delivered" far past its start). Its deliveries keep
// the invariant above, and the first ack would acknowledge what it
// delivered before. So before a session pulls, an AckAll consumer must
// not have delivered past the checkpoint (before the loop processed
// anything, the consumer's ack floor), unless the stream no longer holds
// the messages in between; otherwise the session ends as a gap and Open
// recreates the consumer.
//
// Acknowledgement: AckAll consumers get one Ack of the batch's last
// message (after the Terms of Outcome.Term); explicit ones an Ack or Term
// per message. A transient failure (errors.Is(err, ErrRetry)) is retried
// with exponential backoff: on an AckAll consumer the same batch is handed
// to the handler again (order is kept, and the delivery count does not
// grow); on an explicit one every message of the batch is nak'ed with the
// backoff's delay, so JetStream redelivers it then. Re-opening the
// consumer is retried with the same backoff until the context ends.
//
// A handler error that is StoreFull (the broker refuses a write for lack
// of room) is waited out like a transient one, wrapped with Retry or not:
// nothing is acknowledged, and the batch is handled again until the
// broker takes its outputs. The StoreWatch of the context
// (WithStoreWatch), if any, knows while the loop waits.
//
// # Ordered atomic commits
//
// A Committer (ingest's writes to RAW, the validator's to a replicated
// VALID) stores an ordered sequence of messages so that, per subject, the
// stream holds them in the order given, each at most once per Nats-Msg-Id,
// across failed publishes, retries, leader changes and restarts
// (docs/spec.md §4, docs/recovery.md). It sends JetStream atomic batches
// (the stream needs AllowAtomicPublish: Ensure), one at a time: the server
// stages a batch and stores all of it or none of it, answering only the
// commit, and the next batch is sent only once the one before it is
// confirmed, so no message is stored ahead of one that is not. A batch
// whose commit fails or times out is sent again, whole, under a new batch
// id; if the lost attempt was stored after all, its message ids make the
// server refuse the new one.
//
// The server refuses a whole batch when any id in it is inside the
// stream's duplicate window, so known duplicates are taken out first: an
// id repeated within the call, or one the Committer stored less than its
// duplicate trust ago (it acks with the original's sequence). A batch
// refused for a duplicate nobody here knew of (after a restart, or a batch
// stored without its ack arriving) is resolved in order: its head is
// walked one plain publish at a time while those answer "duplicate"; if
// the very first message is new, the duplicate is further in and the
// batches are halved until it stands alone. A single message always goes
// as a plain publish: with nothing else in flight, its retries cannot
// reorder anything. A server whose max_batch_size is below the batch size
// is detected and followed.
//
// With SubjectLasts (ingest's writes to RAW) the commit message of every
// batch also carries wire.HdrBatchLasts, where each subject's messages of
// the batch end: the batch is stored whole at consecutive sequences ending
// at the commit's, so a reader of the commit knows the batch's layout (the
// validator's barrier uses it). A plain publish of a message read back
// drops it with the other batch headers.
//
// # Chained runs
//
// On a one-replica stream (CommitterConfig.ChainIfOneReplica: ingest's
// RAW on a single server) the server would stage every atomic batch in a
// synced file store of its own, most of the cost of a small batch. There
// the Committer sends chained runs instead: plain publishes, pipelined,
// each after the first of a run carrying Nats-Expected-Last-Msg-Id of the
// one before it. The server stores a message only right after its
// predecessor, so a refused or lost message stops the rest of the run,
// whatever another writer or a restart does in between; the first message
// of a run goes only once everything before it is confirmed. Message ids
// are unique, so every stored copy of a message follows the stored copy
// of the one before it, and the order holds across retries. Only the
// first and the last message of a run ask for an ack: the last stored new
// at the first's sequence plus the run's length less one proves that every
// message between was stored new, one after the other. Any other answer
// sends the rest again asking for every ack; the ones the unsure run
// stored come back duplicates exactly where it put them (right after its
// first message, one after the other, above what the Committer knew
// stored) and are reported new; a duplicate anywhere else was stored
// before, by anyone. Chained runs carry no
// wire.HdrBatchLasts: their messages may lie between another writer's.
//
// Commit returns the stream's sequence of every message it confirmed, and
// stops at the first it could not confirm within RetryFor: every message
// before it is stored, in order; it and the ones after it may or may not
// be, so the caller sends again from it (ingest names it: "record at line
// N ... not confirmed stored in RAW").
//
// GroupPublisher shares one Committer among the validator's partitions:
// the calls that meet in time go in one atomic batch, which on a
// single-replica file stream (where every atomic batch is staged in a
// synced store of its own) is most of the saving. Each call still returns
// only once its own messages are stored. On a single-replica VALID the
// validator uses PublishInOrder instead: one server stores a connection's
// messages in the order it receives them, so pipelined publishes with the
// client's retries off keep the order, and a message stored after an
// earlier one of its subject failed is reported (ErrOrderBroken) rather
// than repaired.
package stream
