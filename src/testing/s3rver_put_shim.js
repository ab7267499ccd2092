// Preloaded into s3rver by the tests (node --require this file).
//
// s3rver answers a PUT once it has handed the body to a file write stream,
// before the stream has written it, so a GET right after the answer can read
// a short or empty object; under load the conformance suite saw exactly
// that. S3 is read-after-write consistent and ckpt relies on it (a save
// reads back what it wrote), so this replaces the file store's putObject
// with one that answers only once the object's bytes are in the file.
//
// s3rver also writes the object's file in place: a client killed in the
// middle of a PUT left an empty or short object under the key (the
// concurrency stress test found a lease that could no longer be read), and
// two PUTs of one key at once could interleave their bytes. On S3 a PUT
// takes effect whole or not at all, so this writes the body beside the
// object and renames it into place only once all of it (as many bytes as
// the request's Content-Length says) has arrived.
'use strict';

const crypto = require('crypto');
const path = require('path');
const { pipeline, Readable, Transform } = require('stream');

// process.argv[1] is s3rver's bin/s3rver.js; its modules sit beside it.
const lib = path.join(path.dirname(process.argv[1]), '..', 'lib');
const FilesystemStore = require(path.join(lib, 'stores', 'filesystem.js'));
const fs = require(require.resolve('fs-extra', { paths: [lib] }));

FilesystemStore.prototype.putObject = async function putObject(object) {
  const objectPath = this.getResourcePath(object.bucket, object.key, 'object');
  await fs.mkdirp(path.dirname(objectPath));
  const md5 = crypto.createHash('md5');
  let size = 0;
  const source = Buffer.isBuffer(object.content)
    ? Readable.from([object.content])
    : object.content;
  // Beside the object, so that the rename is atomic; a short name of its
  // own, since the object's name may already be as long as a name can be.
  const partial = path.join(
    path.dirname(objectPath),
    `.put-${crypto.randomBytes(8).toString('hex')}`,
  );
  try {
    await new Promise((resolve, reject) => {
      pipeline(
        source,
        new Transform({
          transform(chunk, encoding, callback) {
            md5.update(chunk, encoding);
            size += chunk.length;
            callback(null, chunk);
          },
        }),
        fs.createWriteStream(partial),
        (err) => (err ? reject(err) : resolve()),
      );
    });
    // The request's own header (a multipart upload's completion streams
    // the parts, and carries none).
    const declared = object.content.headers
      ? object.content.headers['content-length']
      : undefined;
    if (declared !== undefined && Number(declared) !== size) {
      throw new Error(`PUT ${object.key}: ${size} of ${declared} bytes came`);
    }
    await fs.rename(partial, objectPath);
  } catch (err) {
    await fs.remove(partial);
    throw err;
  }
  const digest = md5.digest('hex');
  await this.putMetadata(object.bucket, object.key, object.metadata, digest);
  return { size, md5: digest };
};
