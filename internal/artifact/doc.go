// Package artifact is the flow of MegaFlow's execution artifacts between
// workers, the blob store and readers: where each artifact of an attempt
// lives in the store (keys), the manifest that lists them, the collection
// of a task's declared output files from its output directory (refusing
// anything that escapes it), the log shipper that uploads an attempt's
// output while it runs, and the reading back of logs and files. The store
// backends themselves live in internal/blob.
//
// Layout of one attempt under blob.AttemptPrefix ("tenant/graph/task/N/"):
//
//	log/000001, log/000002, ...  the attempt's combined stdout and stderr,
//	                             in chunks of at most MaxChunkBytes
//	out/<path>                   each collected output file, stored as a
//	                             plain file under its path relative to the
//	                             output directory
//	result.json                  a JSON result larger than the table's
//	                             limit (the table then holds a Ref)
//	manifest.json                the Manifest, uploaded last: once it is in
//	                             the store, every chunk and file it lists is
//
// Plain files rather than one tar+zstd archive: a reader fetches one file
// without the others, and each file carries its own SHA-256.
//
// Imported by the worker and the head; clients read artifacts through the
// head's API (Logs, ArtifactList, ArtifactGet) and never import it.
package artifact
