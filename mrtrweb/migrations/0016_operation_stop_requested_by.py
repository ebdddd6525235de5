from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mrtrweb', '0015_tenant_external_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='operation',
            name='stop_requested_by',
            field=models.CharField(blank=True, default='', editable=False, max_length=32),
        ),
    ]
