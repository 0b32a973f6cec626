"""The page as text (the display supervisor's ``page_text`` op, docs/agents.md): the
script Chromium evaluates. Standard library only, like every module of the supervisor."""

# The page as text for agents that read rather than look (``page_text``): one
# evaluation returns the URL, title, the visible text in reading order (innerText:
# what layout shows, hidden elements left out) and the interactive elements with the
# centre of their visible part in SCREEN pixels (the window's offset on the screen and
# its toolbar added, times the device pixel ratio), those in the viewport first. The
# host bounds and checks all of it again: the page is the entrant's or the web's.
PAGE_TEXT_JS = r"""
(() => {
  const MAX_TEXT = %d, MAX_ELEMENTS = %d, MAX_NAME = 200;
  const dpr = window.devicePixelRatio || 1;
  const vw = window.innerWidth, vh = window.innerHeight;
  const side = Math.max(0, (window.outerWidth - vw) / 2);
  const left = window.screenX + side;
  const top = window.screenY + Math.max(0, window.outerHeight - vh - side);
  const clip = (s, n) => {
    s = (s || '').replace(/\s+/g, ' ').trim();
    return s.length > n ? s.slice(0, n - 1) + '\u2026' : s;
  };
  const byIds = (ids) => ids.split(/\s+/).map(id => document.getElementById(id))
    .filter(Boolean).map(e => e.innerText || e.textContent).join(' ');
  const labelOf = (el) => {
    if (el.getAttribute('aria-label')) return el.getAttribute('aria-label');
    const by = el.getAttribute('aria-labelledby');
    if (by && byIds(by).trim()) return byIds(by);
    if (el.labels && el.labels.length) {
      return Array.from(el.labels).map(l => l.innerText || l.textContent).join(' ');
    }
    return '';
  };
  const BUTTONS = ['submit', 'button', 'reset', 'image'];
  const roleOf = (el) => {
    const explicit = el.getAttribute('role');
    if (explicit) return explicit;
    const tag = el.tagName.toLowerCase();
    if (tag === 'a') return 'link';
    if (tag === 'button' || tag === 'summary') return 'button';
    if (tag === 'select') return el.multiple ? 'listbox' : 'combobox';
    if (tag === 'textarea') return 'textbox';
    if (tag === 'input') {
      const t = (el.type || 'text').toLowerCase();
      if (BUTTONS.includes(t) || t === 'file') return 'button';
      if (t === 'checkbox' || t === 'radio') return t;
      if (t === 'search') return 'searchbox';
      if (t === 'range') return 'slider';
      return 'textbox';
    }
    return el.isContentEditable ? 'textbox' : 'generic';
  };
  const nameOf = (el) => {
    let n = labelOf(el);
    const tag = el.tagName.toLowerCase();
    if (!n.trim() && tag === 'input' && BUTTONS.includes((el.type || '').toLowerCase())) {
      n = el.value || el.type;
    }
    if (!n.trim() && !['input', 'select', 'textarea'].includes(tag)) {
      n = el.innerText || el.textContent || '';
    }
    if (!n.trim()) {
      const img = el.querySelector && el.querySelector('img[alt]');
      if (img) n = img.alt;
    }
    if (!n.trim()) n = el.getAttribute('placeholder') || el.getAttribute('title') || '';
    return clip(n, MAX_NAME);
  };
  const selector = 'a[href], button, input:not([type=hidden]), select, textarea, summary, '
    + '[role=button], [role=link], [role=checkbox], [role=tab], [role=menuitem], '
    + '[contenteditable=""], [contenteditable=true]';
  const all = Array.from(document.querySelectorAll(selector));
  const inView = [], offView = [];
  for (const el of all) {
    const shown = {checkOpacity: true, checkVisibilityCSS: true};
    if (el.checkVisibility && !el.checkVisibility(shown)) continue;
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) continue;
    const x0 = Math.max(0, r.left), y0 = Math.max(0, r.top);
    const x1 = Math.min(vw, r.right), y1 = Math.min(vh, r.bottom);
    const visible = x1 - x0 >= 1 && y1 - y0 >= 1;
    (visible ? inView : offView).push({el, r, visible, cx: (x0 + x1) / 2, cy: (y0 + y1) / 2});
  }
  const total = inView.length + offView.length;
  const order = new Map(all.map((el, i) => [el, i]));
  const chosen = inView.concat(offView).slice(0, MAX_ELEMENTS);
  chosen.sort((a, b) => order.get(a.el) - order.get(b.el));
  const focused = document.activeElement;
  const NO_VALUE = [...BUTTONS, 'checkbox', 'radio'];
  const elements = chosen.map((item, i) => {
    const el = item.el, role = roleOf(el), tag = el.tagName.toLowerCase();
    const out = {i, role, name: nameOf(el), tag};
    if (tag === 'input') out.type = (el.type || 'text').toLowerCase();
    if (el.getAttribute('name')) out.field = clip(el.getAttribute('name'), 100);
    const hint = el.getAttribute('placeholder');
    if (hint) out.placeholder = clip(hint, MAX_NAME);
    if (tag === 'a') out.href = el.href.slice(0, 2000);
    if ((tag === 'input' || tag === 'textarea') && !NO_VALUE.includes(out.type)) {
      const secret = out.type === 'password';
      out.value = secret ? (el.value ? '\u2022\u2022\u2022' : '') : clip(el.value, 500);
    }
    if (role === 'checkbox' || role === 'radio') out.checked = !!el.checked;
    if (tag === 'select') {
      const opt = el.selectedOptions && el.selectedOptions[0];
      out.value = opt ? clip(opt.text, MAX_NAME) : '';
      out.options = Array.from(el.options).slice(0, 30).map(o => clip(o.text, 100));
    }
    if (el.disabled) out.disabled = true;
    if (el === focused) out.focused = true;
    if (item.visible) {
      out.x = Math.round((left + item.cx) * dpr);
      out.y = Math.round((top + item.cy) * dpr);
    } else {
      out.offscreen = item.r.bottom <= 0 ? 'above' : item.r.top >= vh ? 'below' : 'beside';
    }
    return out;
  });
  const raw = document.body ? (document.body.innerText || '') : '';
  const text = raw.replace(/[ \t]*\n[ \t\n]*/g, '\n').trim();
  return {
    url: location.href, title: document.title,
    text: text.slice(0, MAX_TEXT), text_truncated: text.length > MAX_TEXT,
    elements, elements_total: total,
    viewport: {width: Math.round(vw * dpr), height: Math.round(vh * dpr),
               left: Math.round(left * dpr), top: Math.round(top * dpr),
               scroll_y: Math.round(window.scrollY),
               page_height: Math.round(document.documentElement.scrollHeight)},
  };
})()
"""
