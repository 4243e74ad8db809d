// Validates schema/asyncapi.yaml with the official AsyncAPI parser
// (@asyncapi/parser, pinned in package.json): the document against the
// AsyncAPI 3 specification and its rules, every $ref (the JSON Schemas under
// schema/json/ included) resolved. Any error or warning fails; so does a
// message whose payload did not resolve to a schema with properties.
//   node asyncapi.mjs DOCUMENT
import { Parser, fromFile } from '@asyncapi/parser';

const path = process.argv[2];
const parser = new Parser();
const { document, diagnostics } = await fromFile(parser, path).parse();
const problems = diagnostics
  .filter((d) => d.severity <= 1) // 0 error, 1 warning (2 info, 3 hint)
  .map((d) => `${d.code}: ${d.message} at ${JSON.stringify(d.path)}`);
if (document) {
  for (const message of document.allMessages()) {
    const payload = message.payload();
    const json = payload ? payload.json() : undefined;
    const resolved = json && (json.properties || json.oneOf || json.$ref === undefined);
    if (!json || json.$ref !== undefined || !resolved) problems.push(`message ${message.id()}: payload not resolved`);
  }
  const operations = document.operations().all().map((o) => o.id()).sort();
  for (const id of ['cancel', 'followBatch', 'followMachines', 'status', 'submit']) {
    if (!operations.includes(id)) problems.push(`operation ${id} missing`);
  }
} else {
  problems.push('the document did not parse');
}
if (problems.length) {
  console.log(problems.join('\n'));
  process.exit(1);
}
console.log(`  ok: ${document.channels().length} channels, ${document.operations().length} operations, ${document.allMessages().length} messages`);
