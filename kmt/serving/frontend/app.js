// kmt-serve's web page: one more client of LibreTranslate's routes (/languages, /translate, /translate_file).
// Every text the user or the server gives is inserted as text (textContent, text nodes), never as markup.
"use strict";

const $ = (id) => document.getElementById(id);
const DEBOUNCE_MS = 150; // typing pauses this long before a request
const page = {
  settings: null,
  languages: [], // [{code, name, targets}] from /languages
  sequence: 0, // the newest request's number: an older answer never replaces a newer one
  controller: null, // aborts the request in flight when a newer one starts
  timer: null,
  translation: "",
  detected: null,
};

const remember = {
  get(name) {
    try {
      return localStorage.getItem(`kmt.${name}`);
    } catch {
      return null;
    }
  },
  set(name, value) {
    try {
      localStorage.setItem(`kmt.${name}`, value);
    } catch {
      // storage off: nothing is kept across reloads
    }
  },
};

class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

async function call(path, options = {}) {
  const response = await fetch(path, options);
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = body && typeof body.error === "string" ? body.error : `${response.status} ${response.statusText}`;
    throw new ApiError(message, response.status);
  }
  return body;
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

function nameOf(code) {
  const found = page.languages.find((language) => language.code === code);
  if (found) return found.name;
  try {
    return new Intl.DisplayNames(["en"], { type: "language" }).of(code) || code; // a target only: not in /languages
  } catch {
    return code;
  }
}

function option(select, value, label) {
  const item = document.createElement("option");
  item.value = value;
  item.textContent = label;
  select.append(item);
}

function targetsOf(source) {
  if (source === "auto") {
    return [...new Set(page.languages.flatMap((language) => language.targets))];
  }
  const found = page.languages.find((language) => language.code === source);
  return found ? found.targets : [];
}

function fillTargets(wanted) {
  const target = $("target");
  target.textContent = "";
  const codes = targetsOf($("source").value);
  for (const code of codes) option(target, code, nameOf(code));
  target.value = codes.includes(wanted) ? wanted : codes[0] || "";
}

function pair() {
  const source = $("source").value === "auto" ? page.detected : $("source").value;
  return source ? `${source}-${$("target").value}` : null;
}

function reversible() {
  const source = $("source").value === "auto" ? page.detected : $("source").value;
  return Boolean(source) && targetsOf($("target").value).includes(source);
}

function updateControls() {
  $("swap").disabled = !reversible();
  const most = (page.settings.alternatives || {})[pair()] || 0;
  $("alternatives-button").hidden = !(most > 0 && formatOf() === "text" && page.translation);
  remember.set("source", $("source").value);
  remember.set("target", $("target").value);
}

function formatOf() {
  return document.querySelector('input[name="format"]:checked').value;
}

function updateCounter() {
  const length = $("q").value.length;
  const limit = page.settings ? page.settings.charLimit : 0;
  const counter = $("counter");
  counter.textContent = `${length} / ${limit} characters`;
  counter.classList.toggle("over", limit > 0 && length > limit);
}

// Words as Python's str.split() counts them: the alignment's i and j index these
function wordSpans(box, text, side) {
  box.textContent = "";
  let index = 0;
  for (const piece of text.split(/(\s+)/)) {
    if (!piece) continue;
    if (/^\s+$/.test(piece)) {
      box.append(document.createTextNode(piece));
      continue;
    }
    const word = document.createElement("span");
    word.className = "word";
    word.textContent = piece;
    word.dataset.side = side;
    word.dataset.index = String(index++);
    word.tabIndex = 0;
    box.append(word);
  }
}

function parseAlignment(text) {
  const links = [];
  for (const link of (text || "").split(/\s+/)) {
    const match = /^(\d+)-(\d+)$/.exec(link);
    if (match) links.push([Number(match[1]), Number(match[2])]);
  }
  return links;
}

function highlight(side, index, links) {
  clearHighlight();
  const other = side === "source" ? "target" : "source";
  const wanted = new Set(links.filter((l) => l[side === "source" ? 0 : 1] === index).map((l) => l[other === "source" ? 0 : 1]));
  if (!wanted.size) return;
  const self = side === "source" ? $("source-words") : $("output");
  const them = side === "source" ? $("output") : $("source-words");
  const word = self.querySelector(`.word[data-index="${index}"]`);
  if (word) word.classList.add("lit");
  for (const word of them.querySelectorAll(".word")) {
    if (wanted.has(Number(word.dataset.index))) word.classList.add("lit");
  }
}

function clearHighlight() {
  for (const word of document.querySelectorAll(".word.lit")) word.classList.remove("lit");
}

function showTranslation(source, translation, alignment) {
  page.translation = translation;
  const output = $("output");
  const links = alignment === undefined ? null : parseAlignment(alignment);
  if (links) {
    wordSpans(output, translation, "target");
    wordSpans($("source-words"), source, "source");
    for (const box of [output, $("source-words")]) {
      box.onmouseover = box.onfocusin = (event) => {
        const word = event.target.closest(".word");
        if (word) highlight(word.dataset.side, Number(word.dataset.index), links);
      };
      box.onmouseout = box.onfocusout = clearHighlight;
    }
  } else {
    output.textContent = translation;
  }
  $("source-box").hidden = !links;
  $("alternatives").hidden = true;
  updateControls();
}

function clearTranslation() {
  page.translation = "";
  $("output").textContent = "";
  $("source-box").hidden = true;
  $("alternatives").hidden = true;
  $("detected").textContent = "";
  updateControls();
}

function request(text, extra = {}) {
  const body = { q: text, source: $("source").value, target: $("target").value, format: formatOf(), ...extra };
  const key = $("api-key").value;
  if (key) body.api_key = key;
  return body;
}

async function translate() {
  const text = $("q").value;
  const number = ++page.sequence;
  if (page.controller) page.controller.abort();
  page.controller = null;
  if (!text.trim()) {
    $("output").setAttribute("aria-busy", "false");
    showError("");
    clearTranslation();
    return;
  }
  if (text.length > page.settings.charLimit) {
    showError(`The text is over this server's limit of ${page.settings.charLimit} characters.`);
    return;
  }
  const controller = new AbortController();
  page.controller = controller;
  $("output").setAttribute("aria-busy", "true");
  const aligned = formatOf() === "text";
  try {
    const answer = await call("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request(text, aligned ? { alignments: true } : {})),
      signal: controller.signal,
    });
    if (number !== page.sequence) return;
    showError("");
    page.detected = answer.detectedLanguage ? answer.detectedLanguage.language : null;
    $("detected").textContent = page.detected ? `Detected: ${nameOf(page.detected)}` : "";
    showTranslation(text, answer.translatedText, answer.alignment);
  } catch (error) {
    if (number !== page.sequence || error.name === "AbortError") return;
    showError(error.message);
  } finally {
    if (number === page.sequence) $("output").setAttribute("aria-busy", "false");
  }
}

function soon() {
  clearTimeout(page.timer);
  page.timer = setTimeout(translate, DEBOUNCE_MS);
}

async function alternatives() {
  const most = (page.settings.alternatives || {})[pair()] || 0;
  const list = $("alternatives");
  try {
    const answer = await call("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request($("q").value, { alternatives: most })),
    });
    list.textContent = "";
    for (const text of answer.alternatives || []) {
      const item = document.createElement("li");
      const choose = document.createElement("button");
      choose.type = "button";
      choose.textContent = text;
      choose.addEventListener("click", () => showTranslation($("q").value, text));
      item.append(choose);
      list.append(item);
    }
    if (!list.children.length) list.append(Object.assign(document.createElement("li"), { textContent: "No other translation." }));
    list.hidden = false;
    showError("");
  } catch (error) {
    showError(error.message);
  }
}

async function copy() {
  const button = $("copy");
  try {
    await navigator.clipboard.writeText(page.translation);
  } catch {
    const range = document.createRange();
    range.selectNodeContents($("output"));
    const selection = getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    document.execCommand("copy");
  }
  button.textContent = "Copied";
  setTimeout(() => (button.textContent = "Copy"), 1500);
}

function swap() {
  if (!reversible()) return;
  const source = $("source").value === "auto" ? page.detected : $("source").value;
  const target = $("target").value;
  $("source").value = target;
  fillTargets(source);
  if (page.translation) $("q").value = page.translation;
  updateCounter();
  updateControls();
  translate();
}

function selectTab(tab) {
  for (const other of document.querySelectorAll('[role="tab"]')) {
    const selected = other === tab;
    other.setAttribute("aria-selected", String(selected));
    other.tabIndex = selected ? 0 : -1;
    $(other.getAttribute("aria-controls")).hidden = !selected;
  }
  tab.focus();
}

function tabs() {
  const all = [...document.querySelectorAll('[role="tab"]')];
  for (const tab of all) {
    tab.addEventListener("click", () => selectTab(tab));
    tab.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (step) selectTab(all[(all.indexOf(tab) + step + all.length) % all.length]);
    });
  }
}

function translateFile() {
  const file = $("file").files[0];
  const status = $("file-status");
  const progress = $("file-progress");
  $("download").hidden = true;
  if (!file) {
    showError("Choose a file first.");
    return;
  }
  const form = new FormData();
  form.append("file", file);
  form.append("source", $("source").value);
  form.append("target", $("target").value);
  if ($("api-key").value) form.append("api_key", $("api-key").value);
  const xhr = new XMLHttpRequest();
  xhr.open("POST", "/translate_file");
  xhr.responseType = "json";
  progress.hidden = false;
  progress.value = 0;
  status.textContent = "Uploading…";
  $("translate-file").disabled = true;
  xhr.upload.onprogress = (event) => {
    if (event.lengthComputable) progress.value = (100 * event.loaded) / event.total;
  };
  xhr.upload.onload = () => {
    progress.removeAttribute("value"); // the server translates: an indeterminate bar
    status.textContent = `Translating ${file.name}…`;
  };
  xhr.onload = () => {
    const body = xhr.response;
    $("translate-file").disabled = false;
    progress.hidden = true;
    if (xhr.status !== 200 || !body || !body.translatedFileUrl) {
      status.textContent = "";
      showError(body && body.error ? body.error : `${xhr.status} ${xhr.statusText}`);
      return;
    }
    showError("");
    const link = $("download");
    link.href = new URL(body.translatedFileUrl, location.href).pathname; // this server's own route
    link.download = file.name;
    link.textContent = `Download ${file.name}, translated`;
    link.hidden = false;
    status.textContent = "Done.";
  };
  xhr.onerror = () => {
    $("translate-file").disabled = false;
    progress.hidden = true;
    status.textContent = "";
    showError("The server could not be reached.");
  };
  xhr.send(form);
}

async function start() {
  for (;;) {
    try {
      page.settings = await call("/frontend/settings");
      page.languages = await call("/languages");
      break;
    } catch (error) {
      showError(error.status === 503 ? "The model is loading…" : error.message);
      if (error.status !== 503) return;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
  showError("");
  const source = $("source");
  if (page.languages.length > 1) option(source, "auto", "Detect language");
  for (const language of page.languages) option(source, language.code, language.name);
  const kept = remember.get("source");
  const known = [...source.options].some((item) => item.value === kept);
  source.value = known ? kept : page.settings.language.source.code;
  fillTargets(remember.get("target") || page.settings.language.target.code);
  $("key-box").hidden = !page.settings.keyRequired;
  $("api-key").value = remember.get("apiKey") || "";
  $("formats").textContent = `Formats: ${page.settings.supportedFilesFormat.join(", ")}`;
  $("file").accept = page.settings.supportedFilesFormat.join(",");
  updateCounter();
  updateControls();

  $("q").addEventListener("input", () => {
    updateCounter();
    soon();
  });
  source.addEventListener("change", () => {
    fillTargets($("target").value);
    updateControls();
    translate();
  });
  $("target").addEventListener("change", () => {
    updateControls();
    translate();
  });
  for (const radio of document.querySelectorAll('input[name="format"]')) radio.addEventListener("change", translate);
  $("api-key").addEventListener("change", () => {
    remember.set("apiKey", $("api-key").value);
    translate();
  });
  $("swap").addEventListener("click", swap);
  $("copy").addEventListener("click", copy);
  $("alternatives-button").addEventListener("click", alternatives);
  $("translate-file").addEventListener("click", translateFile);
  tabs();
  if ($("q").value) translate();
}

start();
