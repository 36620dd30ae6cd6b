// Markdown of hostile text (the model's answer) into a DOM fragment: marked turns it into HTML with raw
// HTML escaped and images shown as links, then DOMPurify keeps only a small list of tags and attributes
// and links to http, https and mailto (opened in a new tab, without opener or referrer). The result is
// a fragment, never a string assigned to innerHTML.
import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";

const ALLOWED_TAGS = ["a", "p", "br", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li",
  "h1", "h2", "h3", "h4", "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td"];
const ALLOWED_ATTR = ["href", "title", "start", "align"];
const SAFE_URL = /^(?:https?:|mailto:)/i;

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

const marked = new Marked({
  gfm: true,
  breaks: true,
  async: false,
  renderer: {
    // raw HTML in the text is shown as text
    html(token) {
      return escapeHtml(token.text);
    },
    // no image is ever loaded (it would be a request to wherever the model says): a link instead
    image(token) {
      const label = "image: " + (token.text || token.href);
      return '<a href="' + escapeHtml(token.href) + '">' + escapeHtml(label) + "</a>";
    },
  },
});

const purifier = DOMPurify(window);
purifier.addHook("afterSanitizeAttributes", (node) => {
  if (node.nodeName === "A") {
    const href = node.getAttribute("href") || "";
    if (!SAFE_URL.test(href.trim())) {
      node.removeAttribute("href");
    } else {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  }
});

export function renderMarkdown(text) {
  let html;
  try {
    html = marked.parse(String(text || ""));
  } catch {
    html = "<p>" + escapeHtml(text) + "</p>";
  }
  const fragment = purifier.sanitize(html, {
    ALLOWED_TAGS,
    ALLOWED_ATTR,
    ALLOWED_URI_REGEXP: SAFE_URL,
    ALLOW_DATA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  });
  // a link whose address was refused is plain text, not something that looks clickable
  for (const link of fragment.querySelectorAll("a:not([href])")) link.replaceWith(...link.childNodes);
  return fragment;
}
