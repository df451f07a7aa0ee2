// Package lease lets the instances of one kind (validator, windower) share
// a generation's partitions without indices (docs/spec.md §9): every
// instance joins its kind's group in the generation's lease bucket
// (wire.Names.LeaseBucket) and holds a lease on each partition it owns.
//
// Keys of the bucket, per kind k: k.member.<id> (one per live instance)
// and k.lease.<p> (the owner of partition p). Every write carries a
// per-message TTL (Nats-TTL): a key not rewritten within the TTL expires
// and the server leaves a delete marker that watchers see.
//
// Invariants:
//   - A lease is taken only by a create that expects the key to be absent
//     (or deleted), and renewed or released only by a write that expects
//     the holder's last revision: a partition has at most one holder.
//   - The epoch of a lease is the revision of the write that took it.
//     Revisions only grow in a bucket, across expiry and re-creation of a
//     key, so a later owner always has a larger epoch (the fencing token).
//   - A holder counts a lease as held only until its last successful
//     renewal's send time plus the TTL minus one renewal period: it stops
//     saying it owns a partition before the server can give it away.
//   - Every member computes the same target (Assign) from the live members
//     and the current holders; it releases what it holds beyond its target
//     only when asked (after its service drained the partition), and takes
//     free partitions of its target by itself.
package lease
