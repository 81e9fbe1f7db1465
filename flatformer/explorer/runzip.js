// A run folder as a zip archive, no DOM: safetensors checkpoints in the layout runs.py reads
// (float64 tensors under their TransformerLens names plus "optim.*", header padded to 8 bytes)
// and a STORE-method zip writer (no compression, CRC-32 per file).
"use strict";

const FlatRunZip = (() => {
  const enc = new TextEncoder();

  // safetensors: 8-byte little-endian header length, the JSON header, then the data.
  function safetensors(tensors) {
    const header = {__metadata__: {format: "flatformer-1"}};
    let offset = 0;
    const names = Object.keys(tensors).sort();
    for (const name of names) {
      const {data, shape} = tensors[name];
      header[name] = {dtype: "F64", shape, data_offsets: [offset, offset + 8 * data.length]};
      offset += 8 * data.length;
    }
    let text = JSON.stringify(header);
    while ((8 + enc.encode(text).length) % 8) text += " ";
    const head = enc.encode(text), out = new Uint8Array(8 + head.length + offset);
    const view = new DataView(out.buffer);
    view.setUint32(0, head.length, true);
    out.set(head, 8);
    let at = 8 + head.length;
    for (const name of names) {
      for (const x of tensors[name].data) { view.setFloat64(at, x, true); at += 8; }
    }
    return out;
  }

  // One checkpoint file from the flat weights (FlatModel.paramShapes layout) and the optimizer state.
  function checkpoint(shapes, ck) {
    const tensors = {};
    let o = 0;
    for (const [name, shape] of shapes) {
      const n = shape.reduce((a, b) => a * b, 1);
      tensors[name] = {data: ck.flat.subarray(o, o + n), shape};
      o += n;
    }
    const one = (x) => ({data: [x], shape: [1]});
    Object.assign(tensors, {"optim.m": {data: ck.m, shape: [ck.m.length]},
      "optim.v": {data: ck.v, shape: [ck.v.length]}, "optim.t": one(ck.t),
      "optim.candidate": one(ck.candidate), "optim.loss_sum": one(ck.loss_sum),
      "optim.loss_n": one(ck.loss_n)});
    return safetensors(tensors);
  }

  const CRC = (() => {
    const t = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      t[n] = c >>> 0;
    }
    return t;
  })();

  function crc32(bytes) {
    let c = 0xffffffff;
    for (let i = 0; i < bytes.length; i++) c = CRC[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  }

  // files: [[path, Uint8Array | string]] -> ArrayBuffer of a zip holding them, stored.
  function zip(files) {
    const parts = [], central = [];
    let offset = 0;
    for (const [path, content] of files) {
      const data = typeof content === "string" ? enc.encode(content) : content;
      const name = enc.encode(path), crc = crc32(data);
      const local = new DataView(new ArrayBuffer(30));
      local.setUint32(0, 0x04034b50, true); local.setUint16(4, 20, true);
      local.setUint32(14, crc, true); local.setUint32(18, data.length, true);
      local.setUint32(22, data.length, true); local.setUint16(26, name.length, true);
      const c = new DataView(new ArrayBuffer(46));
      c.setUint32(0, 0x02014b50, true); c.setUint16(4, 20, true); c.setUint16(6, 20, true);
      c.setUint32(16, crc, true); c.setUint32(20, data.length, true); c.setUint32(24, data.length, true);
      c.setUint16(28, name.length, true); c.setUint32(42, offset, true);
      parts.push(new Uint8Array(local.buffer), name, data);
      central.push(new Uint8Array(c.buffer), name);
      offset += 30 + name.length + data.length;
    }
    const size = central.reduce((n, p) => n + p.length, 0);
    const end = new DataView(new ArrayBuffer(22));
    end.setUint32(0, 0x06054b50, true); end.setUint16(8, files.length, true);
    end.setUint16(10, files.length, true); end.setUint32(12, size, true); end.setUint32(16, offset, true);
    const all = [...parts, ...central, new Uint8Array(end.buffer)];
    const out = new Uint8Array(all.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of all) { out.set(p, at); at += p.length; }
    return out.buffer;
  }

  // The run folder: config.json, metrics.jsonl, checkpoints/step_XXXXXX.safetensors.
  function runZip(config, metrics, checkpoints, shapes, folder) {
    const files = [[`${folder}/config.json`, JSON.stringify(config, null, 2) + "\n"],
      [`${folder}/metrics.jsonl`, metrics.map((m) => JSON.stringify(m) + "\n").join("")]];
    for (const [step, ck] of [...checkpoints].sort((a, b) => a[0] - b[0])) {
      files.push([`${folder}/checkpoints/step_${String(step).padStart(6, "0")}.safetensors`, checkpoint(shapes, ck)]);
    }
    return zip(files);
  }

  return {safetensors, checkpoint, crc32, zip, runZip};
})();

if (typeof module !== "undefined") module.exports = FlatRunZip;
