// The web page's script: uploads (drop or pick files) with a progress bar,
// new folders and deletes, with PUT, MKCOL and DELETE on the page's URLs.
"use strict";
(function () {
  const drop = document.getElementById("drop");
  const msg = document.getElementById("msg");
  const bar = document.getElementById("progress");
  function say(text, bad) {
    if (!msg) return;
    msg.textContent = text;
    msg.className = bad ? "err" : "";
  }
  function upload(files) {
    const base = drop.dataset.base;
    const list = Array.from(files);
    let done = 0;
    function next() {
      if (list.length === 0) {
        say("uploaded " + done + " file(s)");
        setTimeout(function () { location.reload(); }, 300);
        return;
      }
      const f = list.shift();
      const xhr = new XMLHttpRequest();
      xhr.open("PUT", base + encodeURIComponent(f.name));
      xhr.upload.onprogress = function (e) {
        if (e.lengthComputable) bar.value = (100 * e.loaded) / e.total;
      };
      xhr.onload = function () {
        if (xhr.status >= 200 && xhr.status < 300) {
          done++;
          bar.value = 100;
          next();
        } else {
          say("upload of " + f.name + " refused: " + xhr.status + " " + xhr.responseText.trim(), true);
        }
      };
      xhr.onerror = function () { say("upload of " + f.name + " failed: the gateway could not be reached", true); };
      say("uploading " + f.name + " ...");
      xhr.send(f);
    }
    next();
  }
  if (drop) {
    drop.addEventListener("dragover", function (e) { e.preventDefault(); drop.classList.add("over"); });
    drop.addEventListener("dragleave", function () { drop.classList.remove("over"); });
    drop.addEventListener("drop", function (e) {
      e.preventDefault();
      drop.classList.remove("over");
      upload(e.dataTransfer.files);
    });
    document.getElementById("file").addEventListener("change", function (e) { upload(e.target.files); });
    document.getElementById("mkdir").addEventListener("submit", function (e) {
      e.preventDefault();
      const name = document.getElementById("dirname").value;
      fetch(drop.dataset.base + encodeURIComponent(name) + "/", { method: "MKCOL" }).then(function (r) {
        if (r.ok) location.reload();
        else r.text().then(function (t) { say("creating folder " + name + " refused: " + r.status + " " + t.trim(), true); });
      });
    });
  }
  document.querySelectorAll("button.del").forEach(function (b) {
    b.addEventListener("click", function () {
      fetch(b.dataset.url, { method: "DELETE" }).then(function (r) {
        if (r.ok) location.reload();
        else r.text().then(function (t) { say("delete refused: " + r.status + " " + t.trim(), true); });
      });
    });
  });
})();
