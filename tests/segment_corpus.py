"""Hard cases for voicecli.segment: (input, expected segments, Segmenter options).

Each case is checked whole, one character at a time and in random chunks.
"""

from __future__ import annotations

from typing import Any

Case = tuple[str, list[str], dict[str, Any]]

D: dict[str, Any] = {}  # default options
FAST: dict[str, Any] = {"fast_first": True}
LINES: dict[str, Any] = {"newline_is_boundary": True}
TINY: dict[str, Any] = {"min_chars": 0}  # isolates a boundary rule from short-merging

CASES: list[Case] = [
    # --- plain sentences -------------------------------------------------------------
    ("Hello there, friend. How are you today?", ["Hello there, friend.", "How are you today?"], D),
    ("This is great! I love it so much.", ["This is great!", "I love it so much."], D),
    ("Is it raining? Take an umbrella then.", ["Is it raining?", "Take an umbrella then."], D),
    ("One sentence only", ["One sentence only"], D),
    ("", [], D),
    ("   \n\n  ", [], D),
    ("Really?! That is wild. Okay then.", ["Really?! That is wild.", "Okay then."], D),
    ("No way!!! That cannot be right.", ["No way!!! That cannot be right."], D),
    ("First one here.  Second one here.", ["First one here.", "Second one here."], D),
    ("Trailing spaces here.   ", ["Trailing spaces here."], D),
    ("A. B.", ["A. B."], D),
    ("End with a digit 7. Then more words.", ["End with a digit 7.", "Then more words."], D),
    # --- abbreviations ---------------------------------------------------------------
    ("Dr. Smith is here. He is early.", ["Dr. Smith is here.", "He is early."], D),
    ("Mr. and Mrs. Jones arrived late.", ["Mr. and Mrs. Jones arrived late."], D),
    ("Ms. Lee met Prof. Brown at noon.", ["Ms. Lee met Prof. Brown at noon."], D),
    ("Ask Dr. Who about it. It knows.", ["Ask Dr. Who about it.", "It knows."], D),
    (
        "We met at St. Louis station. It was cold.",
        ["We met at St. Louis station.", "It was cold."],
        D,
    ),
    ("I live on Main St. It is quiet there.", ["I live on Main St.", "It is quiet there."], D),
    (
        "Use fruit, e.g. apples or pears, in the pie.",
        ["Use fruit, e.g. apples or pears, in the pie."],
        D,
    ),
    ("Use a tool, e.g. Python, for this task.", ["Use a tool, e.g. Python, for this task."], D),
    ("Pick one, i.e. the best one, and go.", ["Pick one, i.e. the best one, and go."], D),
    ("Bring pens, paper, etc. and a bag.", ["Bring pens, paper, etc. and a bag."], D),
    (
        "Bring pens, paper, etc. Then leave home.",
        ["Bring pens, paper, etc.", "Then leave home."],
        D,
    ),
    ("It is Python vs. Rust tonight.", ["It is Python vs. Rust tonight."], D),
    ("See No. 5 in the list now.", ["See No. 5 in the list now."], D),
    (
        "The answer was No. Then we left the room.",
        ["The answer was No.", "Then we left the room."],
        D,
    ),
    ("As Fig. 2 shows, the curve rises.", ["As Fig. 2 shows, the curve rises."], D),
    ("It takes approx. 5 minutes to boil.", ["It takes approx. 5 minutes to boil."], D),
    ("We start on Jan. 15 this year.", ["We start on Jan. 15 this year."], D),
    (
        "It snowed a lot in Jan. Then it melted fast.",
        ["It snowed a lot in Jan.", "Then it melted fast."],
        D,
    ),
    ("See vol. 3 and pp. 12 for details.", ["See vol. 3 and pp. 12 for details."], D),
    ("Acme Inc. The company grew fast.", ["Acme Inc.", "The company grew fast."], TINY),
    ("Acme Inc. Products are sold widely.", ["Acme Inc. Products are sold widely."], D),
    ("Martin Luther King Jr. was a leader.", ["Martin Luther King Jr. was a leader."], D),
    ("Compare this, cf. the earlier chapter.", ["Compare this, cf. the earlier chapter."], D),
    ("I live in the U.S. The weather varies.", ["I live in the U.S.", "The weather varies."], D),
    (
        "The U.S. Army is large. It trains daily.",
        ["The U.S. Army is large.", "It trains daily."],
        D,
    ),
    ("She earned a Ph.D. in physics last year.", ["She earned a Ph.D. in physics last year."], D),
    ("He moved to the U.K. last summer.", ["He moved to the U.K. last summer."], D),
    ("DR. HOUSE IS HERE. HE IS LATE.", ["DR. HOUSE IS HERE.", "HE IS LATE."], D),
    ("Smith et al. found this effect in mice.", ["Smith et al. found this effect in mice."], D),
    # --- initials --------------------------------------------------------------------
    ("J. R. R. Tolkien wrote it. It is long.", ["J. R. R. Tolkien wrote it.", "It is long."], D),
    (
        "John F. Kennedy spoke here. It was historic.",
        ["John F. Kennedy spoke here.", "It was historic."],
        D,
    ),
    ("Take vitamin C. It helps a lot.", ["Take vitamin C.", "It helps a lot."], D),
    ("We chose plan B. Then it failed badly.", ["We chose plan B.", "Then it failed badly."], D),
    (
        "H. G. Wells wrote books. They sold well.",
        ["H. G. Wells wrote books.", "They sold well."],
        D,
    ),
    # --- numbers ---------------------------------------------------------------------
    ("Pi is 3.14 roughly. Nice number.", ["Pi is 3.14 roughly.", "Nice number."], TINY),
    ("It costs $4.99 today. Buy it now.", ["It costs $4.99 today.", "Buy it now."], TINY),
    (
        "The total is 1,000.50 euros. That is a lot.",
        ["The total is 1,000.50 euros.", "That is a lot."],
        D,
    ),
    ("The price is 4.99. Next item please.", ["The price is 4.99.", "Next item please."], D),
    ("The price is 4. Next item please.", ["The price is 4.", "Next item please."], D),
    ("Temperatures hit -3.5 degrees at night.", ["Temperatures hit -3.5 degrees at night."], D),
    ("Growth was 12.5% this year. Good news.", ["Growth was 12.5% this year.", "Good news."], TINY),
    ("It is .5 inches thick. Very thin.", ["It is .5 inches thick.", "Very thin."], TINY),
    ("Step 1. Then step 2. Then we stop here.", ["Step 1. Then step 2.", "Then we stop here."], D),
    (
        "We picked option A. Option B was worse for us.",
        ["We picked option A.", "Option B was worse for us."],
        D,
    ),
    # --- ellipses as style guides space them, and inline lists (the Golden Rules') -----
    (
        "Wait . . . what did you say? I missed it.",
        ["Wait . . . what did you say?", "I missed it."],
        D,
    ),
    ("He stopped . . . Then he left for good.", ["He stopped . . . Then he left for good."], D),
    (
        "It was over . . . . Then we all went home.",
        ["It was over . . . .", "Then we all went home."],
        D,
    ),
    (
        "It ended. . . . Then came the rest of it.",
        ["It ended.", ". . . Then came the rest of it."],
        TINY,
    ),
    (
        "A quote [...] goes on here. The next one.",
        ["A quote [...] goes on here.", "The next one."],
        D,
    ),
    ("See N°. 5 on the list. It is the best.", ["See N°. 5 on the list.", "It is the best."], D),
    (
        "1. Buy some milk 2. Buy some eggs 3. Go home",
        ["1. Buy some milk", "2. Buy some eggs", "3. Go home"],
        TINY,
    ),
    ("b. Second item here c. Third item", ["b. Second item here", "c. Third item"], TINY),
    (
        "Scores were 10.5, 11.25 and 9.75 in total.",
        ["Scores were 10.5, 11.25 and 9.75 in total."],
        D,
    ),
    ("There were 5. 10 more came later.", ["There were 5.", "10 more came later."], TINY),
    ("The year was 1999. It was a good year.", ["The year was 1999.", "It was a good year."], D),
    # --- versions, IPs, times, dates ------------------------------------------------
    ("Upgrade to v2.5.1 now. It fixes bugs.", ["Upgrade to v2.5.1 now.", "It fixes bugs."], D),
    ("Python 3.12.1 is out. Try it today.", ["Python 3.12.1 is out.", "Try it today."], D),
    (
        "Ping 192.168.0.1 first. Then ping 10.0.0.1.",
        ["Ping 192.168.0.1 first.", "Then ping 10.0.0.1."],
        D,
    ),
    ("Upgrade to v2. It is faster now.", ["Upgrade to v2.", "It is faster now."], D),
    ("Meet me at 3:30 p.m. tomorrow afternoon.", ["Meet me at 3:30 p.m. tomorrow afternoon."], D),
    ("The meeting ends at 5 p.m. Then we eat.", ["The meeting ends at 5 p.m.", "Then we eat."], D),
    ("Wake up at 6:45 a.m. sharp every day.", ["Wake up at 6:45 a.m. sharp every day."], D),
    ("It is due 2024-01-15. Please finish it.", ["It is due 2024-01-15.", "Please finish it."], D),
    ("Version 1.0.0-beta.2 shipped. It works.", ["Version 1.0.0-beta.2 shipped.", "It works."], D),
    # --- URLs, emails, files ---------------------------------------------------------
    (
        "Visit https://example.com/a.b?x=1 for docs. Then log in.",
        ["Visit https://example.com/a.b?x=1 for docs.", "Then log in."],
        D,
    ),
    (
        "Go to www.example.org today. It has news.",
        ["Go to www.example.org today.", "It has news."],
        D,
    ),
    (
        "See https://example.com. It explains all.",
        ["See https://example.com.", "It explains all."],
        D,
    ),
    (
        "Email a.b@c.com for help. We reply fast.",
        ["Email a.b@c.com for help.", "We reply fast."],
        D,
    ),
    (
        "Edit config.toml first. Then restart it.",
        ["Edit config.toml first.", "Then restart it."],
        D,
    ),
    ("Read README.md and setup.py carefully.", ["Read README.md and setup.py carefully."], D),
    ("Open the file main.rs. Then compile it.", ["Open the file main.rs.", "Then compile it."], D),
    ("The site is example.com. Go there now.", ["The site is example.com.", "Go there now."], D),
    (
        "Call os.path.join() here. It joins paths.",
        ["Call os.path.join() here.", "It joins paths."],
        D,
    ),
    # --- ellipses --------------------------------------------------------------------
    ("Wait... what did you say?", ["Wait... what did you say?"], D),
    ("I think… maybe not today.", ["I think… maybe not today."], D),
    ("Hmm, let me think... Okay, I have it.", ["Hmm, let me think...", "Okay, I have it."], D),
    ("And then… The lights went out.", ["And then… The lights went out."], D),
    ("Loading.... Done at last, finally.", ["Loading.... Done at last, finally."], D),
    (
        "It was dark... Then the sun rose slowly.",
        ["It was dark...", "Then the sun rose slowly."],
        TINY,
    ),
    # --- quotes and brackets -------------------------------------------------------
    ('He said "hi." Then he left.', ['He said "hi."', "Then he left."], D),
    ("She said 'go away.' So I went away.", ["She said 'go away.'", "So I went away."], D),
    ("(This is an aside.) Now back to it.", ["(This is an aside.)", "Now back to it."], D),
    ("Is that “true?” I doubt it very much.", ["Is that “true?”", "I doubt it very much."], D),
    ('"Is it?" he asked the old man.', ['"Is it?" he asked the old man.'], D),
    ('She replied, "Yes!" And she smiled.', ['She replied, "Yes!"', "And she smiled."], D),
    ("This is **important.** Read it twice.", ["This is **important.**", "Read it twice."], D),
    ("It is *very* good. You should try.", ["It is *very* good.", "You should try."], D),
    ('"Dr. Who" is a show. It is old.', ['"Dr. Who" is a show.', "It is old."], D),
    ("See the docs (e.g. the FAQ) for more.", ["See the docs (e.g. the FAQ) for more."], D),
    # --- lowercase after a period --------------------------------------------------
    ("The value is approx. five hundred now.", ["The value is approx. five hundred now."], D),
    ("Use the dept. of health form for this.", ["Use the dept. of health form for this."], D),
    # --- short fragments merge -------------------------------------------------------
    ("Yes. I can help with that request.", ["Yes. I can help with that request."], D),
    ("Sure! Here is what you asked for.", ["Sure! Here is what you asked for."], D),
    ("Ok. Ok. Ok. Ok. Ok.", ["Ok. Ok. Ok. Ok.", "Ok."], D),
    ("That is a long enough one. Short.", ["That is a long enough one.", "Short."], D),
    ("Hi.", ["Hi."], D),
    ("Yes. No. Maybe.", ["Yes.", "No.", "Maybe."], TINY),
    # --- paragraphs and newlines (chat mode) ---------------------------------------
    (
        "First paragraph here.\n\nSecond paragraph here.",
        ["First paragraph here.", "Second paragraph here."],
        D,
    ),
    (
        "A line without a stop\ncontinues on the next line.",
        ["A line without a stop\ncontinues on the next line."],
        D,
    ),
    ("Sure!\n\nHere is the full answer.", ["Sure!", "Here is the full answer."], D),
    (
        "Paragraph one has no period\n\nParagraph two has none",
        ["Paragraph one has no period", "Paragraph two has none"],
        D,
    ),
    (
        "Ends here.\nNext line starts a sentence.",
        ["Ends here.", "Next line starts a sentence."],
        TINY,
    ),
    ("Windows line\r\n\r\nendings work too.", ["Windows line", "endings work too."], D),
    ("Many\n\n\n\nblank lines between.", ["Many", "blank lines between."], D),
    # --- lists -----------------------------------------------------------------------
    (
        "Steps:\n1. Install Python.\n2. Create a venv.\n3. Run the tests.",
        ["Steps:\n1. Install Python.", "2. Create a venv.", "3. Run the tests."],
        D,
    ),
    (
        "- apples are red\n- bananas are yellow\n- kiwis are green",
        ["- apples are red", "- bananas are yellow", "- kiwis are green"],
        D,
    ),
    (
        "* first bullet item\n* second bullet item",
        ["* first bullet item", "* second bullet item"],
        D,
    ),
    (
        "+ plus style item one\n+ plus style item two",
        ["+ plus style item one", "+ plus style item two"],
        D,
    ),
    (
        "1) paren style item\n2) another paren item",
        ["1) paren style item", "2) another paren item"],
        D,
    ),
    ("- a\n- b\n- c\n- d", ["- a\n- b\n- c\n- d"], D),
    (
        "Intro text goes here\n- item one is here\n  - nested item here",
        ["Intro text goes here", "- item one is here", "- nested item here"],
        D,
    ),
    (
        "10. Tenth item in list\n11. Eleventh item here",
        ["10. Tenth item in list", "11. Eleventh item here"],
        D,
    ),
    (
        "a. First lettered item\nb. Second lettered item",
        ["a. First lettered item", "b. Second lettered item"],
        D,
    ),
    (
        "1. Dr. Smith is first.\n2. Mr. Jones is second.",
        ["1. Dr. Smith is first.", "2. Mr. Jones is second."],
        D,
    ),
    ("-5 degrees is cold\n-10 is colder still", ["-5 degrees is cold\n-10 is colder still"], D),
    (
        "**Bold line** starts here\n**Another bold** line",
        ["**Bold line** starts here\n**Another bold** line"],
        D,
    ),
    # --- headings --------------------------------------------------------------------
    (
        "# Installation Guide\nRun the installer now.",
        ["# Installation Guide", "Run the installer now."],
        D,
    ),
    ("## Setup\nRun pip install voicecli first.", ["## Setup\nRun pip install voicecli first."], D),
    (
        "Some intro text here\n### Details heading\nMore text follows here.",
        ["Some intro text here", "### Details heading", "More text follows here."],
        D,
    ),
    ("#hashtag is not a heading at all", ["#hashtag is not a heading at all"], D),
    # --- tables ----------------------------------------------------------------------
    (
        "| Name | Age |\n|------|-----|\n| Alice | 30 |\n| Bob | 25 |",
        ["| Name | Age |", "|------|-----|", "| Alice | 30 |", "| Bob | 25 |"],
        D,
    ),
    ("Here is a table:\n| a | b |\n| 1 | 2 |", ["Here is a table:", "| a | b |\n| 1 | 2 |"], D),
    # --- fenced code -----------------------------------------------------------------
    (
        "Run this:\n```bash\npip install foo. Then bar.\n```\nThat installs it.",
        ["Run this:", "```bash\npip install foo. Then bar.\n```", "That installs it."],
        D,
    ),
    ("```\ncode only\n```", ["```\ncode only\n```"], D),
    (
        "Text before.\n```python\ndef f():\n\n    return 1. + 2.\n```\n\nText after it.",
        ["Text before.", "```python\ndef f():\n\n    return 1. + 2.\n```", "Text after it."],
        D,
    ),
    (
        "Unclosed fence:\n```js\nlet x = 1;\nlet y = 2;",
        ["Unclosed fence:", "```js\nlet x = 1;\nlet y = 2;"],
        D,
    ),
    (
        "Tilde fence below.\n~~~\na. b. c.\n~~~\nDone with it.",
        ["Tilde fence below.", "~~~\na. b. c.\n~~~", "Done with it."],
        D,
    ),
    (
        "Nested:\n````md\n```\ninner\n```\n````\nAfter the block.",
        ["Nested:", "````md\n```\ninner\n```\n````", "After the block."],
        D,
    ),
    ("Use ```inline``` style here. It is odd.", ["Use ```inline``` style here.", "It is odd."], D),
    (
        "Closing with trailing spaces\n```\nx = 1\n```   \nNow the end here.",
        ["Closing with trailing spaces", "```\nx = 1\n```", "Now the end here."],
        D,
    ),
    (
        "Not a close:\n```\n``` not closing\nstill code\n```",
        ["Not a close:", "```\n``` not closing\nstill code\n```"],
        D,
    ),
    (
        "Indented fence:\n   ```\n   code\n   ```\nback to text.",
        ["Indented fence:", "```\n   code\n   ```", "back to text."],
        D,
    ),
    # --- CJK -------------------------------------------------------------------------
    ("你好。世界！", ["你好。", "世界！"], TINY),
    ("这是第一句话。这是第二句话？", ["这是第一句话。", "这是第二句话？"], TINY),
    ("他说「好。」然后走了。", ["他说「好。」", "然后走了。"], TINY),
    ("日本語の文です。次の文です。", ["日本語の文です。", "次の文です。"], TINY),
    ("Mixed text. 中文句子。English again.", ["Mixed text.", "中文句子。", "English again."], TINY),
    # --- newline mode ----------------------------------------------------------------
    ("line one\nline two\nline three", ["line one", "line two", "line three"], LINES),
    ("ERROR disk full\n\nWARN retry", ["ERROR disk full", "WARN retry"], LINES),
    (
        "no terminator here\nDr. Smith logged in\n",
        ["no terminator here", "Dr. Smith logged in"],
        LINES,
    ),
    ("short\nx\n", ["short", "x"], LINES),
    (
        "A first sentence. A second sentence.\nNext line.",
        ["A first sentence.", "A second sentence.", "Next line."],
        LINES,
    ),
    ("Ends with Dr.\nSmith on next line", ["Ends with Dr.", "Smith on next line"], LINES),
    ("price 4.\n99 bottles", ["price 4.", "99 bottles"], LINES),
    ("- item\n# head\n| t |", ["- item", "# head", "| t |"], LINES),
    (
        "2024-01-15 12:00:01 INFO started\n2024-01-15 12:00:02 INFO ready\n",
        ["2024-01-15 12:00:01 INFO started", "2024-01-15 12:00:02 INFO ready"],
        LINES,
    ),
    ("log ```\nnot a fence\n", ["log ```", "not a fence"], LINES),
    # --- fast first ------------------------------------------------------------------
    (
        "Sure, I can help you with that, and more. Second sentence.",
        ["Sure,", "I can help you with that, and more.", "Second sentence."],
        FAST,
    ),
    (
        "Well, here is the thing you asked about: it works. Then more.",
        ["Well,", "here is the thing you asked about: it works.", "Then more."],
        FAST,
    ),
    (
        "Yes, definitely. The rest of it, however, stays whole.",
        ["Yes,", "definitely. The rest of it, however, stays whole."],
        FAST,
    ),
    (
        "It is simple — just run the command. Then wait.",
        ["It is simple —", "just run the command.", "Then wait."],
        FAST,
    ),
    (
        "This is really simple — just run it. Then wait here.",
        ["This is really simple —", "just run it.", "Then wait here."],
        FAST,
    ),
    (
        "The plan is quite simple - run it twice. Then stop.",
        ["The plan is quite simple -", "run it twice.", "Then stop."],
        FAST,
    ),
    (
        "A well-known fact is true, friends. Yes it is.",
        ["A well-known fact is true,", "friends. Yes it is."],
        FAST,
    ),
    (
        "Here are three options; pick one. Then go.",
        ["Here are three options;", "pick one. Then go."],
        FAST,
    ),
    (
        "At 3:30 we meet in the hall, then leave.",
        ["At 3:30 we meet in the hall,", "then leave."],
        FAST,
    ),
    (
        "The total is 1,000,000 dollars, give or take.",
        ["The total is 1,000,000 dollars,", "give or take."],
        FAST,
    ),
    (
        "Short, tiny, bit. Then a much longer sentence, with commas, follows.",
        ["Short,", "tiny, bit. Then a much longer sentence, with commas, follows."],
        FAST,
    ),
    (
        "Here is the list you wanted:\n- one\n- two",
        ["Here is the list you wanted:", "- one\n- two"],
        FAST,
    ),
    (
        "你好，这是一个很长的句子，对吧。",
        ["你好，这是一个很长的句子，", "对吧。"],
        {"fast_first": True, "min_chars": 4},
    ),
    (
        "One two three four, five six. Seven, eight nine ten eleven.",
        ["One two three four,", "five six. Seven, eight nine ten eleven."],
        FAST,
    ),
    # --- overlong --------------------------------------------------------------------
    (
        "alpha beta gamma delta, epsilon zeta eta theta iota kappa lambda mu.",
        ["alpha beta gamma delta,", "epsilon zeta eta theta iota kappa lambda", "mu."],
        {"max_chars": 40},
    ),
    (
        "one two three, four five six seven eight nine ten eleven twelve.",
        ["one two three, four five six seven", "eight nine ten eleven twelve."],
        {"max_chars": 36},
    ),
    (
        "first clause here is long, second clause is longer still, third one ends.",
        ["first clause here is long,", "second clause is longer still,", "third one ends."],
        {"max_chars": 32},
    ),
    ("x" * 50 + " tail words here", ["x" * 50, "tail words here"], {"max_chars": 20}),
    ("短" * 30, ["短" * 10, "短" * 10, "短" * 10], {"max_chars": 10, "min_chars": 4}),
    # --- realistic LLM replies -------------------------------------------------------
    (
        "Sure! Here's how to install it.\n\n"
        "## Steps\n\n"
        "1. Download the installer from https://example.com/download.\n"
        "2. Run `setup.exe` and follow the prompts.\n"
        "3. Restart your computer.\n\n"
        "That's it! Let me know if you have questions.",
        [
            "Sure! Here's how to install it.",
            "## Steps",
            "1. Download the installer from https://example.com/download.",
            "2. Run `setup.exe` and follow the prompts.",
            "3. Restart your computer.",
            "That's it! Let me know if you have questions.",
        ],
        D,
    ),
    (
        "To reverse a list in Python, use slicing:\n\n"
        "```python\nitems = [1, 2, 3]\nprint(items[::-1])  # [3, 2, 1]\n```\n\n"
        "This creates a new list. Alternatively, call `items.reverse()` to do it in place.",
        [
            "To reverse a list in Python,",
            "use slicing:",
            "```python\nitems = [1, 2, 3]\nprint(items[::-1])  # [3, 2, 1]\n```",
            "This creates a new list.",
            "Alternatively, call `items.reverse()` to do it in place.",
        ],
        FAST,
    ),
    (
        "The current price of the item is $19.99, down from $24.50. That's a 20% discount! "
        "The sale ends on Jan. 31 at 11:59 p.m. Eastern.",
        [
            "The current price of the item is $19.99,",
            "down from $24.50.",
            "That's a 20% discount!",
            "The sale ends on Jan. 31 at 11:59 p.m. Eastern.",
        ],
        FAST,
    ),
    (
        "**Short answer:** yes.\n\n**Longer answer:** it depends on the version. In v3.2.1 "
        "the default changed. See the docs at docs.python.org for details.",
        [
            "**Short answer:** yes.",
            "**Longer answer:** it depends on the version.",
            "In v3.2.1 the default changed.",
            "See the docs at docs.python.org for details.",
        ],
        D,
    ),
    (
        "Here's a comparison:\n\n| Feature | A | B |\n|---|---|---|\n| Speed | fast | slow |\n"
        "| Cost | $5 | $10 |\n\nOverall, A is better.",
        [
            "Here's a comparison:",
            "| Feature | A | B |",
            "|---|---|---|",
            "| Speed | fast | slow |",
            "| Cost | $5 | $10 |",
            "Overall, A is better.",
        ],
        D,
    ),
    (
        "Great question! There are a few reasons:\n\n"
        "- **Performance**: it's about 2.5x faster.\n"
        "- **Safety**: memory errors are caught at compile time.\n"
        "- **Tooling**: cargo, rustfmt, clippy, etc. are excellent.",
        [
            "Great question!",
            "There are a few reasons:",
            "- **Performance**: it's about 2.5x faster.",
            "- **Safety**: memory errors are caught at compile time.",
            "- **Tooling**: cargo, rustfmt, clippy, etc. are excellent.",
        ],
        D,
    ),
    (
        "Dr. Jane A. Doe, Ph.D., leads the lab at MIT. Her team published in Nature "
        "(Vol. 12, No. 3) last year.",
        [
            "Dr. Jane A. Doe, Ph.D., leads the lab at MIT.",
            "Her team published in Nature (Vol. 12, No. 3) last year.",
        ],
        D,
    ),
    (
        "Your server at 10.0.0.12 is running nginx 1.24.0. Check /etc/nginx/nginx.conf "
        "and reload it with `sudo systemctl reload nginx`.",
        [
            "Your server at 10.0.0.12 is running nginx 1.24.0.",
            "Check /etc/nginx/nginx.conf and reload it with `sudo systemctl reload nginx`.",
        ],
        D,
    ),
    (
        "Hmm... that's tricky. Let me think. Okay: the answer is 42.",
        ["Hmm... that's tricky.", "Let me think.", "Okay: the answer is 42."],
        D,
    ),
    (
        "I'd suggest three things. First, sleep more. Second, drink water. Third, exercise.",
        [
            "I'd suggest three things.",
            "First, sleep more.",
            "Second, drink water.",
            "Third, exercise.",
        ],
        D,
    ),
    (
        "The meeting is at 9 a.m. on Mon. Jan. 8. Bring your laptop, charger, etc.",
        ["The meeting is at 9 a.m. on Mon. Jan. 8.", "Bring your laptop, charger, etc."],
        D,
    ),
    (
        "# Summary\n\nThe report covers Q3. Revenue rose 12.5% to $4.2M.\n\n## Risks\n\n"
        "Supply costs remain high.",
        [
            "# Summary",
            "The report covers Q3.",
            "Revenue rose 12.5% to $4.2M.",
            "## Risks",
            "Supply costs remain high.",
        ],
        D,
    ),
    (
        "Install it:\n\n```\npip install requests==2.31.0\n```\n\n"
        "Then import it: `import requests`.",
        [
            "Install it:",
            "```\npip install requests==2.31.0\n```",
            "Then import it: `import requests`.",
        ],
        D,
    ),
    (
        "The file `settings.json` lives in ~/.config/app/. Edit it, then restart.",
        ["The file `settings.json` lives in ~/.config/app/.", "Edit it, then restart."],
        D,
    ),
    (
        "Yes.\n\nNo.\n\nMaybe.",
        ["Yes.", "No.", "Maybe."],
        D,
    ),
    (
        "It's 72°F (22°C) outside. Wear a light jacket.",
        ["It's 72°F (22°C) outside.", "Wear a light jacket."],
        D,
    ),
    (
        "Q: What is 2+2?\nA: It is 4.",
        ["Q: What is 2+2?", "A: It is 4."],
        D,
    ),
    (
        "Option A. Option B. Both are valid choices here.",
        ["Option A. Option B.", "Both are valid choices here."],
        D,
    ),
    (
        "Download 10 MB, then 3 GB. The speed is 5 km per hour.",
        ["Download 10 MB, then 3 GB.", "The speed is 5 km per hour."],
        D,
    ),
    (
        "Note: this requires admin rights! Ask your IT dept. first.",
        ["Note: this requires admin rights!", "Ask your IT dept. first."],
        D,
    ),
]
