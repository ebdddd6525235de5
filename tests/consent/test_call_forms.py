"""Call pages' forms whose fields a server chooses (prompt arguments, resource template
variables) are bounded: more than ``MAX_CALL_FIELDS`` makes a form that says why and sends nothing."""

from mrtrweb.views import MAX_CALL_FIELDS, PromptArgumentsForm, ResourceTemplateForm


def test_a_prompt_asking_for_too_many_arguments_gets_a_form_that_cannot_be_sent():
    many = [{"name": f"a{i}"} for i in range(MAX_CALL_FIELDS + 1)]
    form = PromptArgumentsForm(many, {})
    assert not form.fields
    assert not form.is_valid()
    assert f"({MAX_CALL_FIELDS})" in " ".join(form.non_field_errors()) and "nothing can be sent" in form.as_div()


def test_a_prompt_at_the_cap_is_an_ordinary_form():
    args = [{"name": f"a{i}", "required": i == 0} for i in range(MAX_CALL_FIELDS)]
    form = PromptArgumentsForm(args, {"a0": "x"})
    assert len(form.fields) == MAX_CALL_FIELDS and form.is_valid() and form.content() == {"a0": "x"}


def test_a_template_with_too_many_variables_gets_a_form_that_cannot_be_sent():
    template = "demo://x/" + "/".join(f"{{v{i}}}" for i in range(MAX_CALL_FIELDS + 1))
    form = ResourceTemplateForm(template, {})
    assert not form.fields and not form.is_valid()
    assert "nothing can be sent" in " ".join(form.non_field_errors())
    ok = ResourceTemplateForm("demo://reports/{team}", {"team": "a b"})
    assert ok.is_valid() and ok.uri() == "demo://reports/a%20b"
