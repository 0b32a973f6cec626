"""Browser-like 1280×800 screens drawn with Pillow and the DejaVu fonts the setup
installs (fonts-dejavu-core): a tab strip with the page title, an address bar, a page
of text and an input field. For the leak scan's OCR tests and its benchmark."""

import io

from PIL import Image, ImageDraw, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
FONT_BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
SIZE = (1280, 800)


def font(px: int, *, bold: bool = False) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(FONT_BOLD if bold else FONT, px)


def browser_screen(
    *,
    title: str = "Example Domain",
    url: str = "https://example.com/",
    heading: str = "Example Domain",
    lines: list[str] | tuple[str, ...] = (),
    typed: str = "",
    scroll: int = 0,
    text_px: int = 16,
) -> Image.Image:
    """A screen as Chromium shows a simple page; ``scroll`` moves the page text up by
    that many lines, ``typed`` is the text in the page's input field."""
    image = Image.new("RGB", SIZE, "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, SIZE[0], 36), fill="#dee1e6")  # tab strip
    draw.rounded_rectangle((8, 6, 248, 36), radius=8, fill="white")
    draw.text((20, 13), title[:28], fill="#202124", font=font(13))
    draw.rectangle((0, 36, SIZE[0], 76), fill="white")  # toolbar
    draw.rounded_rectangle((90, 42, 1190, 70), radius=14, fill="#f1f3f4")
    draw.text((110, 48), url, fill="#202124", font=font(14))
    draw.line((0, 76, SIZE[0], 76), fill="#dadce0")
    y = 110
    draw.text((60, y), heading, fill="black", font=font(28, bold=True))
    y += 56
    body = font(text_px)
    for line in list(lines)[scroll:]:
        if y > SIZE[1] - 110:
            break
        draw.text((60, y), line, fill="#222222", font=body)
        y += int(text_px * 1.6)
    draw.rectangle((60, 720, 560, 756), outline="#767676", width=1)  # an input field
    draw.text((70, 728), typed, fill="black", font=font(18))
    return image


def text_image(text: str, *, size: tuple[int, int] = (640, 160), px: int = 32) -> Image.Image:
    """``text`` in black on white, as a delivered chart or scan might carry it."""
    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((20, 40), text, fill="black", font=font(px))
    return image


def encoded(image: Image.Image, format: str = "PNG", **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format, **params)
    return buffer.getvalue()


PROSE = [
    "This domain is for use in illustrative examples in documents. You may use this",
    "domain in literature without prior coordination or asking for permission.",
    "The quarterly figures show revenue of 4.2 million, up 12 percent on the year.",
    "Costs fell slightly; the margin improved to 18 percent after the restructuring.",
    "Next steps: review the supplier contracts and schedule the audit for March.",
    "Shipping times improved in every region except the north-east, which lagged.",
    "Customer satisfaction rose to 87 percent in the latest survey of 2,400 users.",
    "The board approved the budget for the new warehouse and two delivery vans.",
    "Training sessions for the new inventory system begin on the first Monday.",
    "Please send corrections to the operations team before the end of the week.",
    "Appendix A lists every store with its sales per square metre and staff count.",
    "Appendix B compares the three offers for the cleaning contract side by side.",
    "Weather delayed two deliveries in January; both arrived within four days.",
    "The pilot of self-checkout tills ends in June; a decision follows in July.",
    "Energy use per store dropped by 9 percent after the lighting was replaced.",
    "Two new hires join the finance team; their desks are on the second floor.",
    "The car park will be resurfaced over the Easter weekend; plan accordingly.",
    "Quarterly reviews move to Thursdays from next month to suit the regions.",
    "All figures are provisional until the auditors sign off the annual report.",
    "Questions about this report go to the analytics desk, extension 4417.",
]
